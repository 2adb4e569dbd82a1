"""The handle on a child run that ``ctx.start_child`` returns, in both forms."""

from __future__ import annotations

from typing import Any

from perdure.api.blocking import derive, same
from perdure.api.presenting import owned
from perdure.engine import children
from perdure.engine.executor import Execution


class ChildRun:
    """A child run started by ``ctx.start_child`` in an ``async def`` workflow."""

    def __init__(self, execution: Execution, run_id: str, workflow: str) -> None:
        """A handle on child run ``run_id`` of ``workflow``."""
        self._execution = execution
        self.run_id = run_id
        self.workflow = workflow

    async def result(self) -> Any:
        """Wait durably for the child to finish; its output, or ChildFailed."""
        return await children.child_result(self._execution, self.run_id, self.workflow)


@owned
class SyncChildRun(ChildRun):
    """A child run started by ``ctx.start_child`` in a plain ``def`` workflow."""

    result = derive(ChildRun.result, same, same)
