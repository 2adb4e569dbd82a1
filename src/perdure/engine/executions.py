"""The executions a worker holds now, by task id, and how they end when it stops.

A task handed back (a run that parks, a lease lost) can be claimed again by
the same worker while its previous execution is still ending: the entry of
a task id is then the new execution's, and the old one must not remove it
(``Executions.end``), or the worker would take itself for idle. When the
worker stops, those still running after ``shutdown_seconds`` are cancelled
and their tasks handed back (``Executions.finish``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass

from perdure.engine.control import Disconnected
from perdure.store.rows import ClaimedTask
from perdure.store.store import AsyncStore
from perdure.store.writes import Release


@dataclass(eq=False)
class Held:
    """One execution: the task as claimed, and the asyncio task running it."""

    task: ClaimedTask
    job: asyncio.Task[str]


class Executions(dict[int, Held]):
    """The executions in flight, by task id."""

    def add(self, task: ClaimedTask, job: asyncio.Task[str]) -> Held:
        """Hold ``task``'s execution ``job``."""
        held = self[task.fence.task_id] = Held(task, job)
        return held

    def end(self, task: ClaimedTask) -> bool:
        """Forget ``task``'s execution, unless its entry is already a later one's
        (the task claimed again meanwhile); whether it was forgotten."""
        held = self.get(task.fence.task_id)
        if held is None or held.task is not task:
            return False
        del self[task.fence.task_id]
        return True

    def attempts(self) -> dict[int, int]:
        """Each task held, with the attempt its execution holds."""
        return {task_id: held.task.fence.attempt for task_id, held in list(self.items())}

    async def finish(self, store: AsyncStore, seconds: float, at_once: asyncio.Event) -> None:
        """Wait up to ``seconds`` (or until ``at_once`` is set) for the executions in
        flight; cancel the rest and, once they have ended, hand their tasks back."""
        pending = await _wait_for([held.job for held in self.values()], seconds, at_once)
        leftovers = [held for held in list(self.values()) if held.job in pending]
        for held in leftovers:
            held.job.cancel()
        await asyncio.gather(*(h.job for h in leftovers), return_exceptions=True)
        # Handing the tasks back now lets other workers resume the runs at
        # once instead of waiting for the leases to lapse.
        if leftovers:
            with contextlib.suppress(Exception, Disconnected):
                fences = sorted((h.task.fence for h in leftovers), key=lambda f: f.task_id)
                await store.release_tasks([Release(fence, "run_released") for fence in fences])


async def _wait_for(
    jobs: Collection[asyncio.Task[str]], seconds: float, at_once: asyncio.Event
) -> set[asyncio.Task[str]]:
    """Wait up to ``seconds`` for ``jobs``, or until ``at_once``; those still running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pending = set(jobs)
    stop = asyncio.ensure_future(at_once.wait())
    try:
        while pending and not at_once.is_set():
            left = deadline - loop.time()
            if left <= 0:
                break
            done, _ = await asyncio.wait(
                {*pending, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            pending -= done
    finally:
        stop.cancel()
    return pending
