"""A completed step's checkpoint that waits, a moment, for the workflow's next await.

When a step returns, its checkpoint is not written at once: it is held, and
written as soon as the workflow code yields to the event loop, which is
usually its next ``ctx`` call (that call waits for the write before it does
anything). If the workflow returns before it yields, the held checkpoint is
written with the run's completion, as one record: the last step and the
completion cost one round trip and one commit together.

Only the workflow's own synchronous code runs between a step's return and its
checkpoint. A crash in that window is a crash before the checkpoint: the step
runs again on replay, as the at-least-once contract of steps allows. Every
other write of the execution (a release, a wait, another checkpoint) flushes
the held one first, so checkpoints commit in step order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from perdure.engine import faults
from perdure.engine.control import Disconnected, StaleHistory, Unwind
from perdure.store.rows import Fenced
from perdure.store.writes import Checkpoint

#: Sends a checkpoint to be committed; awaited for the answer (engine.writer).
Write = Callable[[Checkpoint], Awaitable[Fenced]]
#: Checks a committed checkpoint's answer (it raises when the lease was lost).
Written = Callable[[Checkpoint, Fenced], None]


class DeferredCheckpoint:
    """At most one held checkpoint of one execution, and the write it is in."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, write: Write, written: Written, enabled: bool
    ) -> None:
        """Hold checkpoints (if ``enabled``) for an execution that sends them with
        ``write`` and checks each answer with ``written``.

        ``write`` is awaited directly: with group commit, a held checkpoint is
        one future in the committer's queue and no coroutine besides this one.
        """
        self.loop = loop
        self.write = write
        self.written = written
        self.enabled = enabled
        self.pending: Checkpoint | None = None
        self.flushing: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Whether a checkpoint is held or being written."""
        return self.pending is not None or self.flushing is not None

    def can_hold(self, kind: str) -> bool:
        """Whether a completed step of ``kind`` may have its checkpoint held.

        Plain steps only, one at a time. A test's faults do not change this:
        they run the path production runs (``after_checkpoint`` fires once
        the held checkpoint has committed).
        """
        return self.enabled and kind == "step" and not self.busy

    def hold(self, checkpoint: Checkpoint) -> None:
        """Hold ``checkpoint`` until the workflow yields."""
        self.pending = checkpoint
        self.loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        if self.pending is not None and self.flushing is None:
            self.flushing = self.loop.create_task(self._flush())

    async def _flush(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            self.written(pending, await self.write(pending))
            faults.hit("after_checkpoint", pending.name)

    async def flush_now(self) -> None:
        """Write the held checkpoint now, if there is one, and wait until it committed."""
        task = self.flushing
        if task is not None:
            try:
                await task
            finally:
                if self.flushing is task:
                    self.flushing = None
        if self.pending is not None:
            await self._flush()

    def take(self) -> Checkpoint | None:
        """The held checkpoint, not written yet, for the caller to write with the completion."""
        if self.flushing is not None or self.pending is None:
            return None
        held, self.pending = self.pending, None
        return held

    async def drop(self) -> None:
        """Forget the held checkpoint: the task is lost, or handed back without it."""
        self.pending = None
        task, self.flushing = self.flushing, None
        if task is not None:
            with contextlib.suppress(Exception, Unwind, StaleHistory, Disconnected):
                await task
