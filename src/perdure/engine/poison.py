"""A claimed task whose stored data cannot be decoded: found before it runs, failed alone.

The store reads a JSON value that Python cannot decode (an integer of 5000
digits, arrays nested 3000 deep: valid ``jsonb``, written outside perdure's
checks) as an ``Undecodable`` marker instead of
failing the claim that read it. Each claimed task is checked here, one by one,
before it executes: a task whose run input or checkpoints hold a marker fails
its run at once, with ``UndecodablePayload`` naming the
field and the reason, by a write fenced on its own lease. The other tasks of
the same claim run as if nothing happened; no retry, lapse or lease is spent.
It is the row that is bad, not the database: never a fault to hand back.
"""

from __future__ import annotations

from typing import Any

from perdure.engine import compensation
from perdure.engine.control import Outcome
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution
from perdure.errors import UndecodablePayload
from perdure.store.codec import unreadable
from perdure.store.loaders import Undecodable
from perdure.store.rows import ClaimedTask


def found(task: ClaimedTask) -> UndecodablePayload | None:
    """The error of the first undecodable value among ``task``'s input and checkpoints."""
    if isinstance(task.input, Undecodable):
        return UndecodablePayload(task.run_id, "the input", task.input.reason)
    for step in task.steps or ():
        for what, value in (("output", step.output), ("error", step.error)):
            marker = unreadable(value)
            if marker is not None:
                field = f"the {what} of step {step.name!r} at position {step.position}"
                return UndecodablePayload(task.run_id, field, marker.reason)
    return None


def check(run_id: str, field: str, value: Any) -> Any:
    """``value``, or UndecodablePayload when the store could not decode it."""
    if isinstance(value, Undecodable):
        raise UndecodablePayload(run_id, field, value.reason)
    return value


def refuse(ex: Execution, field: str, value: Any) -> Any:
    """``value``, or the run stops for good (UndecodablePayload, which the
    workflow cannot catch away) when the store could not decode it."""
    if isinstance(value, Undecodable):
        ex.doom(UndecodablePayload(ex.task.run_id, field, value.reason))
    return value


async def fail(task: ClaimedTask, error: UndecodablePayload, env: ExecutionEnv) -> Outcome:
    """Fail ``task``'s run with ``error`` (fenced on its lease), without running it."""
    statements = env.store.statements
    if task.finished:
        # Cancelled or paused while claimed: let go, as any execution would.
        await env.store.execute(statements.tasks.settle(task.fence))
        return Outcome.SETTLED
    _, text = compensation.failure_json(error)
    result = await env.store.execute(statements.runs.fail(task.fence, text, any_state=True))
    if not result.leased:
        env.lease_lost(task)
        return Outcome.LEASE_LOST
    if not result.changed:
        return Outcome.CANCELLED
    env.run_finished(task.run_id, task.workflow, "failed", error)
    return Outcome.FAILED
