"""Compensation: a run that failed for good undoes its completed steps, newest first."""

from __future__ import annotations

import traceback
from typing import Any

from perdure.engine import serialization
from perdure.engine.executor import Execution
from perdure.engine.stops import STOPS, stopped
from perdure.errors import Cancelled, StepFailed


def failure_json(exc: BaseException) -> tuple[dict[str, Any], str]:
    tb = "".join(traceback.format_exception(exc))
    record = serialization.error_record(exc, tb)
    for attr in ("step", "position", "recorded", "requested"):
        if hasattr(exc, attr):
            record[attr] = getattr(exc, attr)
    return record, serialization.error_json(record)


async def run(execution: Execution, cause: Exception | None) -> str:
    """Run the registered compensations, newest first, each a durable step; end the run.

    The run turns 'compensating' first. Each compensation is a checkpointed
    step at the positions after the failure, so a crash resumes after the
    last one that completed. A compensation that fails for good does not stop
    the others; the run ends 'compensation_failed' instead of 'compensated'.
    """
    task, env = execution.task, execution.env
    store, statements = env.store, env.store.statements
    if cause is not None:
        _, text = failure_json(cause)
        if not (await store.execute(statements.runs.compensating(task.fence, text))).leased:
            env.lease_lost(task)
            return "abandoned"
    env.emit("run_compensating", run_id=task.run_id, compensations=len(execution.rollbacks))
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
        return "cancelled"
    status = "compensation_failed" if failed else "compensated"
    error_json = serialization.error_json({"compensations_failed": failed}) if failed else None
    result = await store.execute(statements.runs.fail(task.fence, error_json, status))
    if not result.leased:
        env.lease_lost(task)
        return "abandoned"
    if not result.changed:
        return "cancelled"
    env.run_finished(task.run_id, task.workflow, status, cause)
    return status
