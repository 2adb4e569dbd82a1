"""Claims whose answer was lost: giving back the tasks a worker holds without knowing it.

A claim commits on the server, then its answer is lost with the connection
(a pooler or server restart): the task is claimed under the worker's id, but
the worker never heard of it and does not execute it. Left alone, its lease
would lapse, a whole lease later, and the lapse would count towards
reaping the run for good. Instead, after any failed statement the worker marks
its claims as suspect, and once the database answers again it gives back, in
one statement, every task claimed under its id that it does not hold: due at
once, with no lapse and no failure counted.

What a worker holds: the tasks its claim loop started (the worker's
``running``) and the step tasks its executions claimed for a batch
(``step_task_claim``), registered here the moment their claim answers.
While such a claim is in flight the recovery waits: its answer may still come.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from perdure.store import outage_log
from perdure.store.rows import ClaimedStepTask
from perdure.store.statement import Statement
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.worker")


class Unheld:
    """One worker's record of the claims it may have lost, and their recovery."""

    def __init__(self) -> None:
        """Nothing suspect, no step task claimed."""
        self._suspect = False
        #: How many faults were noted so far (each time ``suspect`` is set).
        self._faults = 0
        #: Step tasks claimed by this worker's executions and still held:
        #: task id -> (run id, faults noted when it was claimed).
        self.step_tasks: dict[int, tuple[str, int]] = {}
        #: Claims of step tasks in flight (their answer not yet read).
        self.claiming = 0
        #: Tasks whose execution died of an error that is no database fault:
        #: left to lapse, as designed, not given back here.
        self.left_to_lapse: set[int] = set()
        #: Set while a recovery runs: claims of step tasks wait for its end.
        self._recovering: asyncio.Event | None = None

    @property
    def suspect(self) -> bool:
        """Whether a statement failed since the last recovery (a claim's answer may be lost)."""
        return self._suspect

    @suspect.setter
    def suspect(self, value: bool) -> None:
        if value:
            self._faults += 1
        self._suspect = value

    async def claim_step_tasks(
        self, store: AsyncStore, run_id: str, statement: Statement[list[ClaimedStepTask]]
    ) -> list[ClaimedStepTask]:
        """Run a claim of ``run_id``'s step tasks; the steps it claimed are held until
        ``drop``."""
        while self._recovering is not None:
            await self._recovering.wait()
        self.claiming += 1
        try:
            claimed = await store.execute(statement)
        finally:
            self.claiming -= 1
        self.step_tasks.update((g.fence.task_id, (run_id, self._faults)) for g in claimed)
        return claimed

    def drop(self, task_ids: Iterable[int]) -> None:
        """The step tasks ``task_ids`` are no longer held (their batch ended).

        If a fault was noted while they were held, a recovery may have run
        meanwhile and left them out: the next one gives back those still
        claimed (a batch cut short by the fault), instead of their lease lapsing.
        """
        for task_id in task_ids:
            found = self.step_tasks.pop(task_id, None)
            if found is not None and found[1] != self._faults:
                self.suspect = True

    def disconnected(self, run_id: str) -> None:
        """The execution of ``run_id`` ended on a lost database: the step tasks it
        claimed are held no longer, and the next recovery gives back those still
        claimed (due at once, no lapse), as it gives back the run's lost claims.

        Without this, steps claimed just before the database went away (their
        batch not started yet, or ended after the recovery ran) would wait out
        their lease while the run, handed back, waits for them.
        """
        for task_id in [t for t, (r, _) in self.step_tasks.items() if r == run_id]:
            del self.step_tasks[task_id]
        self.suspect = True

    async def recover(self, store: AsyncStore, worker_id: str, running: Iterable[int]) -> int:
        """If suspect, give back the tasks claimed under ``worker_id`` that are not held
        (``running`` and the claimed step tasks); how many. Raises as the store does.

        Once done, logs that the database answers again, with the count of
        warnings held back meanwhile (see ``perdure.store.outage_log``).
        """
        if not self.suspect or self.claiming or self._recovering is not None:
            return 0
        recovering = self._recovering = asyncio.Event()
        # Cleared first: a fault noted while the statement runs calls for another.
        self.suspect = False
        try:
            held = [*running, *self.step_tasks, *self.left_to_lapse]
            statement = store.statements.tasks.release_unheld(worker_id, held)
            released = await store.execute(statement)
        except BaseException:
            self.suspect = True
            raise
        finally:
            self._recovering = None
            recovering.set()
        gave = f"gave back {released} task(s) whose claim's answer was lost" if released else ""
        outage_log.back(log, gave)
        return released
