"""Execute a claimed task of a function workflow and record how it ended.

A task of kind 'run' replays the workflow and runs it to its next stop: it
completes, fails (after its compensations, if it registered any), retries
later, waits, or is handed back. A task of kind 'step' replays the workflow
only up to the gather that holds its step task, and executes that step.
"""

from __future__ import annotations

import asyncio
import logging
import traceback

from perdure.engine import compensation, continuing, faults, parallel, serialization
from perdure.engine.control import ContinueAsNew, Outcome, ReplayEnd
from perdure.engine.cursor import ReplayCursor
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution, Spec, StepTaskDone
from perdure.engine.stops import STOPS, stopped
from perdure.engine.writer import FencedWriter
from perdure.errors import (
    NonDeterminismError,
    PermanentError,
    SerializationError,
    StepFailed,
)
from perdure.store.rows import ClaimedTask, StepTask
from perdure.store.writes import Checkpoint, Completion, Release

log = logging.getLogger("perdure.executor")

_PERMANENT = (PermanentError, StepFailed, NonDeterminismError, SerializationError)


async def _start(task: ClaimedTask, spec: Spec, env: ExecutionEnv) -> Execution | None:
    """The execution of ``task``, or None when the run stopped while it was claimed."""
    if task.finished:
        # Cancelled, paused or finished while we claimed it: let go without running.
        await _let_go(task, env)
        return None
    # The claim read the task's checkpoints in its own round trip
    # (step_list_claimed_now): for a step task, those before its gather
    # and its own.
    steps = task.steps or ()
    compensating = task.kind == "run" and task.run_status == "compensating"
    return Execution(
        task,
        spec,
        env,
        ReplayCursor.of(task.run_id, spec.name, spec.version, steps),
        asyncio.get_running_loop(),
        # Held back for group commit only on such a worker, and for a run's own task.
        FencedWriter(
            env, task.fence, task.run_id, holds=env.committer is not None and task.kind == "run"
        ),
        step_task_position=task.step_position if isinstance(task, StepTask) else None,
        failure=await compensation.recorded_failure(env, task.run_id) if compensating else None,
    )


async def execute(task: ClaimedTask, spec: Spec, env: ExecutionEnv) -> Outcome:
    """Execute ``task`` to its next stop; return what happened (for logs and tests)."""
    if isinstance(task, StepTask):
        return await execute_step_task(task, spec, env)
    execution = await _start(task, spec, env)
    if execution is None:
        return Outcome.SETTLED
    try:
        output = await spec.invoke(execution, task.input)
        if execution.fatal is not None:
            raise execution.fatal
        execution.check_alive()
    except STOPS as stop:
        await execution.deferred.drop()
        return await stopped(execution, stop)
    except ContinueAsNew as continuation:
        # The last step's checkpoint, if it is still held, is written first.
        return await _flush_held(execution) or await continuing.write(execution, continuation)
    except Exception as exc:
        if (stop_outcome := await _flush_held(execution)) is not None:
            return stop_outcome
        if execution.run_status == "cancelled":
            await _let_go(task, env)
            return Outcome.CANCELLED
        return await _handle_failure(task, spec, env, execution, exc)
    try:
        text, decoded = serialization.roundtrip(
            output, f"the result of workflow {spec.name!r}", env.max_payload_bytes
        )
        spec.rebuild_result(decoded)  # refuse a result that does not fit its declared type
    except SerializationError as exc:
        return await _flush_held(execution) or await _fail(task, env, exc)
    if task.run_status == "compensating":
        # The run failed for good before a crash; its replay did not fail
        # again, but its compensations must still finish.
        return await _flush_held(execution) or await compensation.run(execution, None)
    # The last step's checkpoint, if it is still waiting, commits with the
    # completion; one already on its way is waited for first.
    last = execution.deferred.take()
    if last is None and (stop_outcome := await _flush_held(execution)) is not None:
        return stop_outcome
    return await _complete(execution, text, last)


async def _let_go(task: ClaimedTask, env: ExecutionEnv) -> None:
    """Settle ``task`` without running it further (its run stopped meanwhile)."""
    store = env.store
    await store.execute(store.statements.tasks.settle(task.fence))


async def _flush_held(execution: Execution) -> Outcome | None:
    """Write the deferred checkpoint; what the execution became if that stopped it."""
    try:
        await execution.deferred.flush_now()
    except STOPS as stop:
        return await stopped(execution, stop)
    return None


async def _complete(execution: Execution, text: str, last: Checkpoint | None) -> Outcome:
    """Finish the run with its output (and its last step's checkpoint, when given)."""
    task, env = execution.task, execution.env
    try:
        result = execution.fenced(
            await env.write(Completion(task.fence, text, last)),
            "its last step was already checkpointed",
        )
    except STOPS as stop:
        return await stopped(execution, stop)
    if last is not None:
        env.observer.step_checkpointed(task.run_id, last.name, "completed")
        try:
            faults.hit("after_checkpoint", last.name)
        except STOPS as stop:
            return await stopped(execution, stop)
    if not result.changed:
        return Outcome.CANCELLED
    env.run_finished(task.run_id, task.workflow, "completed")
    return Outcome.COMPLETED


async def execute_step_task(task: StepTask, spec: Spec, env: ExecutionEnv) -> Outcome:
    """Execute the step a step task (a task of kind 'step') is for."""
    execution = await _start(task, spec, env)
    if execution is None:
        return Outcome.SETTLED
    try:
        await spec.invoke(execution, task.input)
    except StepTaskDone:
        return Outcome.STEP_TASK_COMPLETED
    except STOPS as stop:
        return await stopped(execution, stop)
    except (Exception, ReplayEnd, ContinueAsNew):
        if execution.run_status in ("cancelled", "completed", "failed", "continued"):
            await _let_go(task, env)
            return Outcome.SETTLED
    # The workflow returned or raised without reaching this step.
    try:
        await parallel.finish_unreachable(execution, task.step_position, task.step_name)
    except StepTaskDone:
        pass
    return Outcome.STEP_TASK_UNREACHABLE


async def _handle_failure(
    task: ClaimedTask,
    spec: Spec,
    env: ExecutionEnv,
    execution: Execution,
    exc: Exception,
) -> Outcome:
    cause: Exception = exc
    if isinstance(execution.fatal, Exception):
        cause = execution.fatal
    failures = task.failures + 1
    final = (
        task.run_status == "compensating"
        or isinstance(cause, _PERMANENT)
        or not spec.retry.should_retry(cause, failures)
    )
    if final:
        # A compensating run ends through its compensations even with none
        # registered: its error is recorded already and stays.
        undo = execution.rollbacks or task.run_status == "compensating"
        if undo and not isinstance(cause, NonDeterminismError):
            return await compensation.run(execution, cause)
        return await _fail(task, env, cause)
    delay = spec.retry.delay(failures)
    env.observer.run_retrying(task, delay, cause)
    detail = serialization.error_json(serialization.error_record(cause, traceback.format_exc()))
    (released,) = await env.store.release_tasks(
        [Release(task.fence, "run_retry_scheduled", delay, failed=True, detail_json=detail)]
    )
    return Outcome.RETRYING if released else Outcome.LEASE_LOST


async def _fail(task: ClaimedTask, env: ExecutionEnv, exc: BaseException) -> Outcome:
    _, text = compensation.failure_json(exc)
    result = await env.store.execute(env.store.statements.runs.fail(task.fence, text))
    if not result.leased:
        env.lease_lost(task)
        return Outcome.LEASE_LOST
    if not result.changed:
        return Outcome.CANCELLED
    env.run_finished(task.run_id, task.workflow, "failed", exc)
    return Outcome.FAILED
