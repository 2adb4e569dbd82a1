"""One attempt at a step: run its body, then record how it ended.

The attempt completes (its checkpoint is written, or held for the group
commit), fails and is retried later (the task is handed back for the backoff),
fails for good (StepFailed into the workflow), or snoozes (handed back without
counting a failure). The observers hear of every attempt, and a stop (a lost
lease, shutdown, cancellation) leaves it 'interrupted'.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Protocol

from perdure.engine import faults, nondeterminism, serialization, steplogs
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import Disconnected, StaleHistory, Suspend, Unwind
from perdure.engine.deferred import DeferredCheckpoint
from perdure.engine.environment import ExecutionEnv
from perdure.engine.observer import StepAttempt
from perdure.engine.retry import DEFAULT_STEP_RETRY, RetryPolicy
from perdure.errors import SerializationError, SignalTimeout, StepFailed
from perdure.steps import Snooze
from perdure.store.rows import ClaimedTask
from perdure.store.writes import Checkpoint

_log = logging.getLogger("perdure.worker")

#: What a step does in one attempt: (output JSON, decoded output); no JSON
#: when the body wrote its checkpoint itself (a transaction step).
Body = Callable[[Attempt], Awaitable[tuple[str | None, Any]]]


class Host(Protocol):
    """What an attempt needs of the execution it runs in."""

    task: ClaimedTask
    env: ExecutionEnv
    deferred: DeferredCheckpoint

    def checkpoint_record(
        self, attempt: Attempt, status: str, output_json: str | None
    ) -> Checkpoint:
        """``attempt``'s outcome as the record of its fenced write."""

    async def checkpoint(
        self, attempt: Attempt, status: str, output_json: str | None, error_json: str | None
    ) -> None:
        """Write a checkpoint now; stop if the task is not this worker's."""

    async def release(
        self, delay: float, *, event: str, detail_json: str | None = None
    ) -> NoReturn:
        """Hand the task back, due after ``delay`` s (Suspend)."""


async def run(ex: Host, attempt: Attempt, retry: RetryPolicy | None, body: Body) -> Any:
    """Run ``body`` as ``attempt`` and record its outcome; the step's decoded output."""
    observer = ex.env.observer
    observed = StepAttempt(ex.task, attempt.name, attempt.kind, attempt.number)
    token = observer.step_started(observed)
    # What the observer hears when the attempt ends; a stop (lease lost,
    # shutdown, cancellation, a simulated crash) leaves it 'interrupted'.
    status, error, began = "interrupted", None, time.perf_counter()
    seconds = 0.0
    logged = steplogs.Captured()
    try:
        try:
            faults.hit("before_step", attempt.name)
            watched = ex.env.detect_nondeterminism
            with steplogs.capture() as logged, nondeterminism.in_step(watched):
                text, decoded = await body(attempt)
        except (Suspend, Unwind, StaleHistory, asyncio.CancelledError):
            raise
        except Snooze as snooze:
            seconds = time.perf_counter() - began
            try:
                await _snooze(ex, attempt, snooze)
            except Suspend:
                status = "snoozed"
                raise
        except Exception as exc:
            seconds, error = time.perf_counter() - began, exc
            retrying = _will_retry(attempt, exc, retry)
            try:
                await _failed(ex, attempt, exc, retry, retrying)
            except (Suspend, StepFailed):
                status = "retrying" if retrying else "failed"
                raise
        seconds = time.perf_counter() - began
        faults.hit("before_checkpoint", attempt.name)
        if text is not None:
            offload = ex.env.store.statements.payloads.offload
            if offload is not None and len(text) > offload.above:
                text = await _offload(ex, text)
            if ex.deferred.can_hold(attempt.kind):
                ex.deferred.hold(ex.checkpoint_record(attempt, "completed", text))
                status = "completed"
                return decoded
            await ex.checkpoint(attempt, "completed", text, None)
        status = "completed"
        faults.hit("after_checkpoint", attempt.name)
        return decoded
    finally:
        if status == "interrupted":
            seconds = time.perf_counter() - began
        observer.step_finished(observed, token, status, seconds, error)
        if logged.records and status != "interrupted":
            await _keep_logs(ex, attempt, status, logged)


async def _offload(ex: Host, text: str) -> str:
    """A large output uploaded to the object store now, in a thread: the reference to
    write in its checkpoint. Its bytes need not wait in memory for the checkpoint (a
    batch of a map writes its completions together), and hashing and writing them
    leave the event loop free."""
    payloads = ex.env.store.statements.payloads
    return await asyncio.to_thread(payloads.offload_now, text)


async def _keep_logs(ex: Host, attempt: Attempt, status: str, logged: steplogs.Captured) -> None:
    """Write the attempt's log records (only called when it logged something).

    Best effort: the records are for reading, and a failure to write them
    changes nothing of the run (it is logged by the worker).
    """
    stmt = ex.env.store.statements.steplogs.write(
        run_id=ex.task.run_id,
        position=attempt.position,
        attempt=attempt.number,
        name=attempt.name,
        worker_id=ex.task.fence.worker_id,
        status=status,
        records_json=logged.records_json(),
        truncated=logged.truncated,
    )
    try:
        await ex.env.store.execute(stmt)
    except (Exception, Disconnected) as exc:  # the step's outcome stands without its logs
        _log.warning("the log records of step %r were not kept: %s", attempt.name, exc)


async def _snooze(ex: Host, attempt: Attempt, snooze: Snooze) -> NoReturn:
    """Park the run until the snooze ends; the attempt does not count as a failure."""
    delay = snooze.seconds_from(ex.env.store.statements.clock.wall_now())
    detail = serialization.error_json(
        {"step": attempt.name, "reason": snooze.reason, "delay": delay}
    )
    if attempt.number > 1:
        # Keep the count of real failed attempts: this one does not add to it.
        earlier = Attempt(
            attempt.position, attempt.name, attempt.kind, attempt.number - 1, attempt.started
        )
        await ex.checkpoint(earlier, "retrying", None, None)
    await ex.release(delay, event="step_snoozed", detail_json=detail)


def _will_retry(attempt: Attempt, exc: Exception, retry: RetryPolicy | None) -> bool:
    """Whether this failed attempt is tried again (by the step's policy)."""
    if isinstance(exc, SerializationError | SignalTimeout):
        return False
    return (retry or DEFAULT_STEP_RETRY).should_retry(exc, attempt.number)


async def _failed(
    ex: Host, attempt: Attempt, exc: Exception, retry: RetryPolicy | None, retrying: bool
) -> NoReturn:
    """Record a failed attempt: schedule the retry (Suspend) or fail the step for good."""
    record = serialization.error_record(exc, traceback.format_exc())
    error_text = serialization.error_json(record)
    if retrying:
        delay = (retry or DEFAULT_STEP_RETRY).delay(attempt.number)
        await ex.checkpoint(attempt, "retrying", None, error_text)
        await ex.release(
            delay,
            event="run_retry_scheduled",
            detail_json=serialization.error_json({"step": attempt.name, "delay": delay}),
        )
    await ex.checkpoint(attempt, "failed", None, error_text)
    raise StepFailed(
        attempt.name, record["type"], record["message"], attempt.number, record.get("traceback")
    ) from exc
