"""Reading runs: find one by id or key, list them, their steps and history, wait for results."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from perdure.api.filters import RunFilter
from perdure.api.portal import Portal
from perdure.api.start_options import tags_json
from perdure.engine import arguments
from perdure.errors import ResultTimeout, RunCancelled, RunFailed, RunNotFound
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.types import HistoryEvent, Run, RunStatus, Step, WorkerInfo, WorkflowInfo

if TYPE_CHECKING:
    from perdure.api.registry import Registry

T = TypeVar("T")


class ReadingMixin:
    """The App's read operations on runs, workers and workflows."""

    if TYPE_CHECKING:
        _portal: Portal
        q: Statements
        registry: Registry

        async def _run(self, stmt: Statement[T]) -> T: ...

    async def _find(self, ref: str) -> Run:
        # Text PostgreSQL cannot store (or longer than any key) names no run.
        if not isinstance(ref, str) or not ref or not arguments.storable(ref):
            raise RunNotFound(repr(ref))
        if len(ref) > arguments.MAX_KEY_LENGTH:
            raise RunNotFound(f"{ref[:60]}... ({len(ref)} characters)")
        run = None
        try:
            run = await self._run(self.q.run_get(str(uuid.UUID(ref))))
        except ValueError:
            pass
        if run is None:
            run = await self._run(self.q.run_get_by_key(ref))
        if run is None:
            raise RunNotFound(ref)
        return run

    def get_run(self, ref: str) -> Run:
        """The run with id (or key) ``ref``; RunNotFound if there is none."""
        return self._portal.call(self._find(ref))

    async def get_run_async(self, ref: str) -> Run:
        """The run with id (or key) ``ref`` (async)."""
        return await self._portal.run(self._find(ref))

    def list_runs(
        self,
        *,
        status: RunStatus | str | None = None,
        workflow: str | None = None,
        since: datetime | None = None,
        before: datetime | None = None,
        limit: int = 50,
        parent: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> list[Run]:
        """Runs newest first, filtered by status, workflow, creation time and parent run.

        ``tags`` keeps the runs whose tags include every given pair.
        """
        found = RunFilter(
            status=status, workflow=workflow, since=since, before=before, parent=parent
        ).checked()
        arguments.integer("limit", limit, minimum=1, maximum=10_000)
        return self._portal.call(
            self._run(
                self.q.run_list(
                    status=None if found.status is None else str(found.status),
                    limit=limit,
                    **found.params(),
                    tags_json=tags_json("tags", tags),
                )
            )
        )

    def steps(self, ref: str) -> list[Step]:
        """The step checkpoints of a run, in position order."""
        return self._portal.call(self._steps(ref))

    async def _steps(self, ref: str) -> list[Step]:
        run = await self._find(ref)
        return await self._run(self.q.step_list(run.id))

    def history(self, ref: str) -> list[HistoryEvent]:
        """The append-only history of a run, oldest first."""
        return self._portal.call(self._history(ref))

    async def _history(self, ref: str) -> list[HistoryEvent]:
        run = await self._find(ref)
        return await self._run(self.q.history_list(run.id))

    def workers(self) -> list[WorkerInfo]:
        """Known workers, most recently seen first."""
        return self._portal.call(self._run(self.q.worker_list()))

    def workflows(self) -> list[WorkflowInfo]:
        """Registered workflow versions with run counts by status and the live workers
        that serve each (a version no live worker has gets none of its runs claimed)."""
        return self._portal.call(self._run(self.q.workflow_list()))

    async def _wait_result(self, run_id: str, timeout: float | None) -> Any:
        timeout = arguments.optional_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = 0.005
        while True:
            row = await self._run(self.q.run_status(run_id))
            if row is None:
                raise RunNotFound(run_id)
            status = RunStatus(row["status"])
            if status == RunStatus.COMPLETED:
                # The workflow's code, when this App has it, rebuilds a typed result.
                local = self.registry.get(row["workflow"], row["version"])
                return row["output"] if local is None else local.rebuild_result(row["output"])
            if status.is_failure:
                raise RunFailed(run_id, row["error"], status.value)
            if status == RunStatus.CANCELLED:
                raise RunCancelled(run_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(run_id, timeout or 0.0, status.value)
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            await asyncio.sleep(max(wait, 0.0))
            interval = min(interval * 1.5, 0.25)
