"""Reading runs: find one by id or key, list them, their steps and history, wait for results.

Also the observability reads the dashboard is built on (:meth:`ReadingMixin.count_runs`,
:meth:`~ReadingMixin.run_activity`, held tasks), each served by an index so
that its cost does not grow with finished runs. Listings and counts take the criteria of
one :class:`~perdure.api.filters.RunFilter`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from perdure.api import listing
from perdure.api.filters import RunFilter
from perdure.api.patience import patiently
from perdure.api.portal import Portal
from perdure.engine import arguments
from perdure.errors import ConfigurationError, ResultTimeout, RunCancelled, RunFailed, RunNotFound
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.types import (
    HistoryEvent,
    Run,
    RunPage,
    RunStatus,
    Step,
    WorkerInfo,
    WorkflowInfo,
)

if TYPE_CHECKING:
    from perdure.api.registry import Registry

T = TypeVar("T")
#: The options of list_runs that are not filters.
_PAGING = ("archived", "cursor", "limit")


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
        try:
            run_id: str | None = str(uuid.UUID(ref))
        except ValueError:
            run_id = None
        # A live run first, then an archived one (perdure prune --archive).
        for by_id, by_key in (
            (self.q.run_get, self.q.run_get_by_key),
            (self.q.run_get_archived, self.q.run_get_by_key_archived),
        ):
            run = None if run_id is None else await self._run(by_id(run_id))
            if run is None:
                run = await self._run(by_key(ref))
            if run is not None:
                return run
        raise RunNotFound(ref)

    def get_run(self, ref: str) -> Run:
        """The run with id (or key) ``ref``, live or archived; RunNotFound if there is none."""
        return self._portal.call(self._find(ref))

    async def get_run_async(self, ref: str) -> Run:
        """The run with id (or key) ``ref`` (async)."""
        return await self._portal.run(self._find(ref))

    def list_runs(
        self,
        *,
        status: RunStatus | str | None = None,
        workflow: str | None = None,
        version: int | None = None,
        queue: str | None = None,
        worker: str | None = None,
        key_prefix: str | None = None,
        since: datetime | None = None,
        before: datetime | None = None,
        parent: str | None = None,
        tags: dict[str, str] | None = None,
        runs: Sequence[str] | None = None,
        archived: bool = False,
        cursor: str | None = None,
        limit: int = 50,
    ) -> RunPage:
        """One page of runs, newest first (by ``created_at``, then id), filtered.

        Each filter left None selects any value: ``status``, ``workflow``,
        ``version``, ``queue``, ``worker`` (the id of the worker that last
        claimed the run), ``key_prefix`` (keys that start with it),
        ``since`` (created at or after) and ``before`` (created before), and
        ``parent`` (the children of that run), ``tags`` (runs whose tags
        include every given pair), ``runs`` (only these run ids): the
        criteria of :class:`perdure.RunFilter`. ``archived=True`` lists the
        runs ``perdure prune --archive`` moved to the archive instead. The
        page is a list of at most ``limit`` runs; its ``next_cursor``, passed
        as ``cursor=``, gives the page after it (None on the last page).
        """
        filters = RunFilter(
            status=status,
            workflow=workflow,
            version=version,
            queue=queue,
            worker=worker,
            key_prefix=key_prefix,
            since=since,
            before=before,
            parent=parent,
            tags=tags,
            runs=None if runs is None else tuple(runs),
        ).checked()
        return self._portal.call(self._list_runs(filters, archived, cursor, limit))

    async def list_runs_async(self, **options: Any) -> RunPage:
        """One page of runs (async); the same options as :meth:`list_runs`."""
        filter_options = {k: v for k, v in options.items() if k not in _PAGING}
        try:
            filters = RunFilter(**filter_options).checked()
        except TypeError as exc:
            raise ConfigurationError(f"unknown list_runs option: {exc}") from None
        return await self._portal.run(
            self._list_runs(
                filters,
                options.get("archived", False),
                options.get("cursor"),
                options.get("limit", 50),
            )
        )

    async def _list_runs(
        self, filters: RunFilter, archived: bool, cursor: str | None, limit: int
    ) -> RunPage:
        arguments.flag("archived", archived)
        limit = listing.check_limit(limit)
        after = None if cursor is None else listing.decode_cursor(cursor)
        found = await self._run(
            self.q.run_list(filters.listing(), archived=archived, cursor=after, limit=limit + 1)
        )
        return listing.page(found, limit)

    def steps(self, ref: str) -> list[Step]:
        """The step checkpoints of a run (live or archived), in position order."""
        return self._portal.call(self._steps(ref))

    async def _steps(self, ref: str) -> list[Step]:
        run = await self._find(ref)
        if run.archived:
            return await self._run(self.q.step_list_archived(run.id))
        return await self._run(self.q.step_list(run.id))

    def history(self, ref: str) -> list[HistoryEvent]:
        """The append-only history of a run (live or archived), oldest first."""
        return self._portal.call(self._history(ref))

    async def _history(self, ref: str) -> list[HistoryEvent]:
        run = await self._find(ref)
        if run.archived:
            return await self._run(self.q.history_list_archived(run.id))
        return await self._run(self.q.history_list(run.id))

    def workers(self) -> list[WorkerInfo]:
        """Known workers, most recently seen first."""
        return self._portal.call(self._run(self.q.worker_list()))

    def workflows(self) -> list[WorkflowInfo]:
        """Registered workflow versions with run counts by status and the live workers
        that serve each (a version no live worker has gets none of its runs claimed)."""
        return self._portal.call(self._run(self.q.workflow_list()))

    # Observability reads (the dashboard's) ------------------------------------------

    def count_runs(self, filter: RunFilter | None = None, *, cap: int = 10_000) -> dict[str, int]:
        """How many runs ``filter`` matches in each status (its status is ignored).

        The cost is bounded however many runs are finished. With only a time
        range (or nothing), each status is counted up to ``cap``: a count equal
        to ``cap`` means "cap or more". With a narrowing criterion (workflow,
        version, queue, worker, key prefix, parent, tags or runs), the counts
        are those of the newest ``cap`` matching runs (so they add up to at
        most ``cap``).
        """
        if filter is not None and not isinstance(filter, RunFilter):
            raise ConfigurationError(f"filter must be a perdure.RunFilter, not {filter!r}")
        checked = (filter or RunFilter()).checked()
        arguments.integer("cap", cap, minimum=1, maximum=10_000_000)
        counts = dict.fromkeys((s.value for s in RunStatus), 0)
        if checked.narrowing:
            stmt = self.q.run_count_recent(checked.params(), cap)
        else:
            stmt = self.q.run_count_by_status(checked.params(), list(counts), cap)
        found: dict[str, int] = self._portal.call(self._run(stmt))
        counts.update(found)
        return counts

    def run_activity(self, *, since: datetime, bucket_seconds: float) -> list[dict[str, Any]]:
        """Runs created since ``since``, counted per time bucket and current status.

        Rows of ``bucket`` (the bucket's start), ``status`` and ``n``, oldest
        bucket first; buckets without runs are left out.
        """
        if not isinstance(since, datetime):
            raise ConfigurationError(f"since must be a datetime, not {since!r}")
        seconds = arguments.seconds("bucket_seconds", bucket_seconds, positive=True)
        return self._portal.call(self._run(self.q.run_activity(since, seconds)))

    def registered_workflows(self) -> list[WorkflowInfo]:
        """Registered workflow versions with their definitions, without run counts (cheap)."""
        return self._portal.call(self._run(self.q.workflow_list_registered()))

    def held_tasks(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The tasks workers hold now: worker_id, run_id, kind, workflow, step_name, claimed_at."""
        arguments.integer("limit", limit, minimum=1, maximum=100_000)
        return self._portal.call(self._run(self.q.task_list_claimed(limit)))

    def events(self, ref: str) -> list[dict[str, Any]]:
        """The events run ``ref`` published (ctx.set_event): key, value, position, updated_at."""
        return self._portal.call(self._events(ref))

    async def _events(self, ref: str) -> list[dict[str, Any]]:
        run = await self._find(ref)
        return await self._run(self.q.event_list(run.id))

    async def _wait_result(self, run_id: str, timeout: float | None) -> Any:
        timeout = arguments.optional_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = 0.005
        while True:
            row = await patiently(lambda: self._run(self.q.run_status(run_id)), deadline)
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
