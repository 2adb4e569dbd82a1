"""How an execution that stopped early ends: handed back, lease lost, or replayed again.

The stops are control flow (``BaseException``), not outcomes of the workflow:
a Suspend (the task was handed back), a lost lease, stale history (the task is
handed back at once and replayed from the real history), or a test's
simulated crash.
"""

from __future__ import annotations

import logging

from perdure.engine import faults
from perdure.engine.control import Outcome, StaleHistory, Suspend, Unwind
from perdure.engine.executor import Execution
from perdure.engine.observer import task_fields
from perdure.store.writes import Release

log = logging.getLogger("perdure.executor")

#: How an execution stops early without an outcome of its own.
STOPS = (Suspend, faults.SimulatedCrash, Unwind, StaleHistory)


async def stopped(execution: Execution, stop: BaseException) -> Outcome:
    """What a stop means: handed back (Suspend), a test's simulated death, a lost
    lease, or stale history (the task is handed back to be replayed)."""
    if isinstance(stop, Suspend):
        return Outcome.SUSPENDED
    if isinstance(stop, Unwind):
        execution.env.lease_lost(execution.task)
        return Outcome.LEASE_LOST
    if isinstance(stop, StaleHistory):
        return await _replay_again(execution, stop)
    # A test's simulated death: no further write; the lease must lapse.
    execution.env.observer.simulated_crash(execution.task)
    return Outcome.CRASHED


async def _replay_again(execution: Execution, signal: StaleHistory) -> Outcome:
    """Hand the task back at once, to be replayed from the real history."""
    task, env = execution.task, execution.env
    log.warning("replaying run %s again: %s", task.run_id, signal, extra=task_fields(task))
    await env.store.release_tasks([Release(task.fence, "run_replay_restarted")])
    return Outcome.RELEASED
