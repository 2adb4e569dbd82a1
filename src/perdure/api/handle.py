"""RunHandle: what ``app.start`` returns, to follow one run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perdure.types import Run, RunStatus

if TYPE_CHECKING:
    from perdure.api.app import App


class RunHandle:
    """A reference to one run: its id, plus ways to read its status and wait for it."""

    def __init__(self, app: App, run_id: str, *, created: bool = True) -> None:
        """Refer to run ``run_id`` of ``app``; ``created`` tells if the start made it."""
        self.app = app
        self.id = run_id
        self.created = created

    def __repr__(self) -> str:
        return f"RunHandle(id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def get(self) -> Run:
        """The run as recorded now."""
        return self.app.get_run(self.id)

    async def get_async(self) -> Run:
        """The run as recorded now (async)."""
        return await self.app.get_run_async(self.id)

    def status(self) -> RunStatus:
        """The run's current status."""
        return self.get().status

    async def status_async(self) -> RunStatus:
        """The run's current status (async)."""
        return (await self.get_async()).status

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the run to finish and return its output.

        Raises :class:`~perdure.RunFailed` (with the recorded error and
        traceback) if it failed, :class:`~perdure.RunCancelled` if it was
        cancelled and :class:`~perdure.ResultTimeout` if ``timeout`` seconds
        pass first.
        """
        return self.app._portal.call(self.app._wait_result(self.id, timeout))

    async def result_async(self, timeout: float | None = None) -> Any:
        """Wait for the run's output (async); cancelling the caller stops the wait cleanly."""
        return await self.app._portal.run(self.app._wait_result(self.id, timeout))
