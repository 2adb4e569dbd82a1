"""Compensation: a run that failed for good undoes its completed steps, newest first.

A run compensates however it failed: a step's failure, its body's, or its
own task reaped for good by the reaper (its lease lapsed ``max_lapses`` times,
task_reap). A compensating run's error is recorded before its
compensations run, and its task may be claimed again (after a crash, or,
when it was reaped for good, to compensate at all). That execution replays the
workflow from its checkpoints to register the compensations again, but runs
nothing new: at the first step (gather, wait, child) without a final
checkpoint it raises the recorded failure (``LeaseExpired`` for a task
reaped for good; Execution.end_of_history), so what killed the workers is not run
again, and the failure path below runs the compensations.
"""

from __future__ import annotations

import traceback
from typing import Any

from perdure.engine import serialization
from perdure.engine.control import Outcome
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution
from perdure.engine.stops import STOPS, stopped
from perdure.errors import Cancelled, StepFailed, UndecodablePayload


def failure_json(exc: BaseException) -> tuple[dict[str, Any], str]:
    tb = "".join(traceback.format_exception(exc))
    record = serialization.error_record(exc, tb)
    for attr in ("step", "position", "recorded", "requested"):
        if hasattr(exc, attr):
            record[attr] = getattr(exc, attr)
    if isinstance(exc, UndecodablePayload):
        record.update(field=exc.field, reason=exc.reason)
    return record, serialization.error_json(record)


async def recorded_failure(env: ExecutionEnv, run_id: str) -> dict[str, Any]:
    """The failure a compensating run recorded; its replay stops with it at new work."""
    run = await env.store.execute(env.store.statements.runs.get(run_id))
    if run is not None and isinstance(run.error, str):  # an undecodable record: its marker
        return {"message": run.error}
    return dict(run.error or {}) if run is not None else {}


async def run(execution: Execution, cause: Exception | None) -> Outcome:
    """Run the registered compensations, newest first, each a durable step; end the run.

    The run turns 'compensating' first (its error kept if it already was).
    Each compensation is a checkpointed step at the positions after the
    failure, so a crash resumes after the last one that completed. A
    compensation that fails for good does not stop the others; the run ends
    'compensation_failed' instead of 'compensated', or 'failed' when nothing
    was registered to undo.
    """
    task, env = execution.task, execution.env
    store, statements = env.store, env.store.statements
    if cause is not None:
        _, text = failure_json(cause)
        if not (await store.execute(statements.runs.compensating(task.fence, text))).leased:
            env.lease_lost(task)
            return Outcome.LEASE_LOST
    env.observer.run_compensating(task.run_id, len(execution.rollbacks))
    execution.compensate()
    failed: list[str] = []
    try:
        for rollback in reversed(execution.rollbacks):
            try:
                await execution.step(
                    f"compensate:{rollback.name}",
                    rollback.fn,
                    rollback.args,
                    rollback.kwargs,
                    rollback.retry,
                    kind="compensation",
                )
            except StepFailed:
                failed.append(rollback.name)
    except STOPS as stop:
        return await stopped(execution, stop)
    except Cancelled:
        await store.execute(statements.tasks.settle(task.fence))
        return Outcome.CANCELLED
    status = "compensation_failed" if failed else "compensated" if execution.rollbacks else "failed"
    error_json = serialization.error_json({"compensations_failed": failed}) if failed else None
    result = await store.execute(statements.runs.fail(task.fence, error_json, status))
    if not result.leased:
        env.lease_lost(task)
        return Outcome.LEASE_LOST
    if not result.changed:
        return Outcome.CANCELLED
    env.run_finished(task.run_id, task.workflow, status, cause)
    return Outcome(status)
