"""RunHandle: what ``app.start`` returns, to follow one run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from perdure.api import forms
from perdure.api.core import Core, HasCore
from perdure.api.patience import patiently
from perdure.api.presenting import owned
from perdure.engine import arguments
from perdure.errors import ResultTimeout, RunCancelled, RunFailed, RunNotFound, UndecodablePayload
from perdure.store.loaders import Undecodable
from perdure.types import Run, RunStatus


@owned
class RunHandle:
    """A reference to one run: its id, plus ways to read its status and wait for it."""

    def __init__(self, app: HasCore, run_id: str, *, created: bool = True) -> None:
        """Refer to run ``run_id`` of ``app``; ``created`` tells if the start made it."""
        self.app = app
        self._core = app._core
        self.id = run_id
        self.created = created

    def __repr__(self) -> str:
        return f"RunHandle(id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def _get(self) -> Run:
        """The run as recorded now."""
        return await self._core.find(self.id)

    async def _status(self) -> RunStatus:
        """The run's current status."""
        return (await self._core.find(self.id)).status

    async def _result(self, timeout: float | None = None) -> Any:
        """Wait for the run to finish and return its output.

        Raises [`RunFailed`][perdure.errors.RunFailed] (with the recorded error and
        traceback) if it failed, [`RunCancelled`][perdure.errors.RunCancelled] if it was
        cancelled and [`ResultTimeout`][perdure.errors.ResultTimeout] if ``timeout`` seconds
        pass first. Cancelling an async caller stops the wait cleanly.
        """
        return await wait_result(self._core, self.id, timeout)

    get = forms.blocking_method(_get)
    get_async = forms.awaiting_method(_get)
    status = forms.blocking_method(_status)
    status_async = forms.awaiting_method(_status)
    result = forms.blocking_method(_result)
    result_async = forms.awaiting_method(_result)


async def wait_result(core: Core, run_id: str, timeout: float | None) -> Any:
    """Wait for run ``run_id`` to finish; its output, or RunFailed, RunCancelled, ResultTimeout."""
    timeout = arguments.optional_seconds("timeout", timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = 0.005
    while True:
        row = await patiently(lambda: core.read(core.statements.runs.status(run_id)), deadline)
        if row is None:
            raise RunNotFound(run_id)
        status = RunStatus(row["status"])
        if status == RunStatus.COMPLETED:
            # The workflow's code, when this App has it, rebuilds a typed result.
            if isinstance(row["output"], Undecodable):
                raise UndecodablePayload(run_id, "the output", row["output"].reason)
            local = core.registry.get(row["workflow"], row["version"])
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
