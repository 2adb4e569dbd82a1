"""Execute one claimed task: replay the run's checkpoints, run what is new, record it.

A function workflow is re-run from the top each time its task is claimed.
Every ``ctx.step`` call takes the next position; when the run's history has a
final checkpoint at that position the recorded output is returned (or the
recorded failure raised) without calling the step, and when the recorded name
differs the determinism guard stops the run. Only new steps execute, and each
one's outcome is written with a fenced statement before the workflow moves on.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from psycopg_pool import ConnectionPool

from perdure.engine import faults, serialization
from perdure.engine.control import Abandon, Snooze, Suspend
from perdure.engine.retry import DEFAULT_STEP_RETRY, RetryPolicy
from perdure.errors import (
    Cancelled,
    LeaseLost,
    NonDeterminismError,
    PermanentError,
    SerializationError,
    StepFailed,
    StepTimeout,
)
from perdure.store.rows import ClaimedTask
from perdure.store.statements import Statement
from perdure.store.store import AsyncStore, execute_async, execute_sync
from perdure.types import Step, StepStatus

log = logging.getLogger("perdure.executor")


class WorkflowSpec(Protocol):
    """What the engine needs of a workflow definition (the api layer provides it)."""

    name: str
    version: int
    queue: str
    retry: RetryPolicy

    async def invoke(self, execution: Execution, input: Any) -> Any:
        """Run the workflow body for ``execution`` with ``input``."""


@dataclass
class ExecutionEnv:
    """What every execution on one worker shares."""

    store: AsyncStore
    lease_seconds: float
    threads: Executor
    max_payload_bytes: int = serialization.DEFAULT_MAX_PAYLOAD_BYTES
    sync_pool: ConnectionPool | None = None
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    #: Tasks the heartbeat found taken away; their executions stop at the next ctx call.
    lost_tasks: set[int] = field(default_factory=set)

    def emit(self, event: str, **fields: Any) -> None:
        """Report an engine event to the worker's observer, if any."""
        if self.on_event is not None:
            self.on_event(event, fields)

    def get_sync_pool(self) -> ConnectionPool:
        """A small sync pool for ``ctx.transaction`` steps written as plain ``def``."""
        if self.sync_pool is None:
            self.sync_pool = ConnectionPool(
                self.store.url,
                min_size=0,
                max_size=max(2, self.store.pool.max_size // 2),
                kwargs={"autocommit": True, "application_name": "perdure-tx"},
                open=True,
            )
        return self.sync_pool


@dataclass(frozen=True)
class _Attempt:
    """One attempt at one step: where it is, which try it is, when it began."""

    position: int
    name: str
    kind: str
    number: int
    started: datetime


class ReplayEnd(BaseException):
    """A replay-only execution reached the end of the recorded history."""


class _LeaseGone(Exception):
    """Raised inside a transaction step to roll it back when the fence fails."""


@dataclass
class Execution:
    """The state of one task being executed: its checkpoints and its cursor."""

    task: ClaimedTask
    spec: WorkflowSpec
    env: ExecutionEnv
    steps: dict[int, Step]
    loop: asyncio.AbstractEventLoop
    position: int = 0
    lost: bool = False
    fatal: BaseException | None = None
    #: The run's status as of the last checkpoint: 'cancelled' or 'paused'
    #: stops the workflow at its next ctx call.
    run_status: str = "running"
    #: Replay against recorded history only (check-replay): never run a step.
    replay_only: bool = False
    #: Values written to each stream so far in this execution (replay included).
    stream_seq: dict[str, int] = field(default_factory=dict)

    # Replay ------------------------------------------------------------------

    def check_alive(self) -> None:
        """Stop user code at its next ``ctx`` call once the task is lost or doomed."""
        if self.task.fence.task_id in self.env.lost_tasks:
            self.lost = True
        if self.lost:
            raise Abandon(
                LeaseLost(
                    self.task.fence.task_id, self.task.fence.worker_id, self.task.fence.attempt
                )
            )
        if self.fatal is not None:
            raise self.fatal
        if self.run_status == "cancelled":
            raise Cancelled(self.task.run_id)

    def end_of_history(self) -> None:
        """Stop here when only replaying (check-replay): the code got past the history."""
        if self.replay_only:
            raise ReplayEnd(self.position)

    async def gate(self) -> None:
        """Run before every ctx call: stop if lost or cancelled, park if paused."""
        self.check_alive()
        if self.run_status == "paused":
            await self.release(0.0, event="run_paused_at_step", paused=True)

    async def release(
        self, delay: float, *, event: str, detail_json: str | None = None, paused: bool = False
    ) -> None:
        """Hand the task back, due after ``delay`` s, and stop executing (Suspend)."""
        released = await self.env.store.execute(
            self.env.store.q.task_release(
                self.task.fence,
                delay_seconds=delay,
                failed=False,
                event=event,
                detail_json=detail_json,
                paused=paused,
            )
        )
        if not released:
            self.lost = True
            self.check_alive()
        raise Suspend()

    def _next(self, name: str, kind: str = "step") -> tuple[int, Step | None]:
        self.check_alive()
        position = self.position
        self.position += 1
        recorded = self.steps.get(position)
        if recorded is not None and (recorded.name != name or recorded.kind != kind):
            self.fatal = NonDeterminismError(
                run_id=self.task.run_id,
                workflow=self.spec.name,
                version=self.spec.version,
                position=position,
                recorded=recorded.name,
                requested=name,
            )
            raise self.fatal
        return position, recorded

    def _replayed(self, recorded: Step) -> Any:
        if recorded.status == StepStatus.COMPLETED:
            return recorded.output
        error = recorded.error or {}
        raise StepFailed(
            recorded.name,
            str(error.get("type", "Error")),
            str(error.get("message", "")),
            recorded.attempts,
            error.get("traceback"),
        )

    # Steps -------------------------------------------------------------------

    async def _run_step(
        self,
        name: str,
        kind: str,
        retry: RetryPolicy | None,
        body: Callable[[_Attempt], Awaitable[tuple[str | None, Any]]],
    ) -> Any:
        """Replay step ``name`` from its checkpoint, or run ``body`` and record it.

        ``body`` returns ``(output_json, decoded)``; when ``output_json`` is None
        the body wrote its checkpoint itself (a transaction step). A failure of
        the body is the step's failure; a failure to checkpoint is not.
        """
        await self.gate()
        position, recorded = self._next(name, kind)
        if recorded is not None and recorded.status != StepStatus.RETRYING:
            return self._replayed(recorded)
        self.end_of_history()
        attempt = _Attempt(
            position,
            name,
            kind,
            (recorded.attempts if recorded is not None else 0) + 1,
            self.env.store.q.clock.wall_now(),
        )
        self.env.emit("step_started", run_id=self.task.run_id, step=name, attempt=attempt.number)
        try:
            faults.hit("before_step", name)
            text, decoded = await body(attempt)
        except _LeaseGone:
            self.lost = True
            self.check_alive()
            raise AssertionError("unreachable") from None
        except (Suspend, Abandon, asyncio.CancelledError):
            raise
        except Snooze as snooze:
            await self._snooze(attempt, snooze)
            raise AssertionError("unreachable") from None
        except Exception as exc:
            await self._failed(attempt, exc, retry)
            raise AssertionError("unreachable") from exc
        faults.hit("before_checkpoint", name)
        if text is not None:
            await self._checkpoint(attempt, "completed", text, None)
        faults.hit("after_checkpoint", name)
        return decoded

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        timeout: float | None = None,
    ) -> Any:
        """Run a plain step once per run (at least once across crashes)."""

        async def body(attempt: _Attempt) -> tuple[str | None, Any]:
            if timeout is None:
                result = await self._call(fn, args, kwargs)
            else:
                try:
                    result = await asyncio.wait_for(self._call(fn, args, kwargs), timeout)
                except TimeoutError:
                    raise StepTimeout(name, timeout) from None
            if isinstance(result, Snooze):
                raise result
            return serialization.roundtrip(
                result, f"the output of step {name!r}", self.env.max_payload_bytes
            )

        return await self._run_step(name, "step", retry, body)

    async def transaction(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
    ) -> Any:
        """Run ``fn(conn, ...)`` and write its checkpoint in one database transaction."""
        what = f"the output of transaction step {name!r}"

        async def body(attempt: _Attempt) -> tuple[str | None, Any]:
            checkpoint = functools.partial(self._checkpoint_statement, attempt, "completed")
            if inspect.iscoroutinefunction(fn):
                decoded = await self._transaction_async(fn, args, kwargs, what, checkpoint)
            else:
                decoded = await self.loop.run_in_executor(
                    self.env.threads,
                    functools.partial(self._transaction_sync, fn, args, kwargs, what, checkpoint),
                )
            return None, decoded

        return await self._run_step(name, "transaction", retry, body)

    async def _transaction_async(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        what: str,
        checkpoint: Callable[[str], Any],
    ) -> Any:
        q = self.env.store.q
        async with self.env.store.pool.connection() as conn, conn.transaction():
            if not await execute_async(conn, q.task_lock_fenced(self.task.fence)):
                raise _LeaseGone()
            result = await fn(conn, *args, **kwargs)
            text, decoded = serialization.roundtrip(result, what, self.env.max_payload_bytes)
            leased, written, run_status = await execute_async(conn, checkpoint(text))
            self.run_status = run_status or self.run_status
            if not (leased and written):
                raise _LeaseGone()
        return decoded

    def _transaction_sync(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        what: str,
        checkpoint: Callable[[str], Any],
    ) -> Any:
        q = self.env.store.q
        with self.env.get_sync_pool().connection() as conn, conn.transaction():
            if not execute_sync(conn, q.task_lock_fenced(self.task.fence)):
                raise _LeaseGone()
            result = fn(conn, *args, **kwargs)
            text, decoded = serialization.roundtrip(result, what, self.env.max_payload_bytes)
            leased, written, run_status = execute_sync(conn, checkpoint(text))
            self.run_status = run_status or self.run_status
            if not (leased and written):
                raise _LeaseGone()
        return decoded

    async def _call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        # Plain functions run on the worker's thread pool so a blocking step
        # does not stall the event loop that heartbeats and other runs share.
        result = await self.loop.run_in_executor(
            self.env.threads, functools.partial(fn, *args, **kwargs)
        )
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _snooze(self, attempt: _Attempt, snooze: Snooze) -> None:
        """Park the run until the snooze ends; the attempt does not count as a failure."""
        detail = serialization.error_json(
            {"step": attempt.name, "reason": snooze.reason, "delay": snooze.delay}
        )
        if attempt.number > 1:
            # Keep the count of real failed attempts: this one does not add to it.
            earlier = _Attempt(
                attempt.position, attempt.name, attempt.kind, attempt.number - 1, attempt.started
            )
            await self._checkpoint(earlier, "retrying", None, None)
        self.env.emit(
            "step_snoozed", run_id=self.task.run_id, step=attempt.name, delay=snooze.delay
        )
        await self.release(snooze.delay, event="step_snoozed", detail_json=detail)

    async def _failed(self, attempt: _Attempt, exc: Exception, retry: RetryPolicy | None) -> None:
        """Record a failed attempt: schedule the retry (Suspend) or fail the step for good."""
        policy = retry or DEFAULT_STEP_RETRY
        record = serialization.error_record(exc, traceback.format_exc())
        error_text = serialization.error_json(record)
        if not isinstance(exc, SerializationError) and policy.should_retry(exc, attempt.number):
            delay = policy.delay(attempt.number)
            await self._checkpoint(attempt, "retrying", None, error_text)
            self.env.emit(
                "step_retry",
                run_id=self.task.run_id,
                step=attempt.name,
                attempt=attempt.number,
                delay=delay,
            )
            await self.release(
                delay,
                event="run_retry_scheduled",
                detail_json=serialization.error_json({"step": attempt.name, "delay": delay}),
            )
        await self._checkpoint(attempt, "failed", None, error_text)
        raise StepFailed(
            attempt.name, record["type"], record["message"], attempt.number, record.get("traceback")
        ) from exc

    def _checkpoint_statement(
        self,
        attempt: _Attempt,
        status: str,
        output_json: str | None,
        error_json: str | None = None,
        **publish: Any,
    ) -> Statement[tuple[int, int, str | None]]:
        events = {
            "completed": "step_completed",
            "failed": "step_failed",
            "retrying": "step_retry_scheduled",
            "timed_out": "signal_timed_out",
        }
        return self.env.store.q.step_checkpoint(
            self.task.fence,
            lease_seconds=self.env.lease_seconds,
            position=attempt.position,
            name=attempt.name,
            kind=attempt.kind,
            status=status,
            attempts=attempt.number,
            output_json=output_json,
            error_json=error_json,
            started_at=attempt.started,
            event=events[status],
            detail_json=error_json,
            **publish,
        )

    async def _checkpoint(
        self,
        attempt: _Attempt,
        status: str,
        output_json: str | None,
        error_json: str | None,
        **publish: Any,
    ) -> None:
        statement = self._checkpoint_statement(attempt, status, output_json, error_json, **publish)
        leased, written, run_status = await self.env.store.execute(statement)
        if run_status:
            self.run_status = run_status
        if not leased:
            self.lost = True
            self.check_alive()
        if not written:
            # The lease is ours but the position already holds a final
            # checkpoint: the history this replay started from was stale. Hand
            # the task back so that it is replayed from the real history.
            raise Abandon(
                f"run {self.task.run_id} position {attempt.position} was already checkpointed"
            )
        self.env.emit(
            "step_checkpointed", run_id=self.task.run_id, step=attempt.name, status=status
        )


# Terminal outcomes of a run ---------------------------------------------------------

_PERMANENT = (PermanentError, StepFailed, NonDeterminismError, SerializationError)


async def execute(task: ClaimedTask, spec: WorkflowSpec, env: ExecutionEnv) -> str:
    """Execute ``task`` to its next stop; return what happened (for logs and tests)."""
    store, q, fence = env.store, env.store.q, task.fence
    if task.finished:
        # Cancelled or paused while we claimed it: let go without running.
        await store.execute(q.task_settle(fence))
        return "settled"
    steps = await store.execute(q.step_list(task.run_id))
    execution = Execution(
        task, spec, env, {s.position: s for s in steps}, asyncio.get_running_loop()
    )
    env.emit("run_executing", run_id=task.run_id, attempt=fence.attempt)
    try:
        output = await spec.invoke(execution, task.input)
        if execution.fatal is not None:
            raise execution.fatal
        execution.check_alive()
    except Suspend:
        return "suspended"
    except faults.SimulatedCrash:
        # A test's simulated death: no further write; the lease must lapse.
        env.emit("simulated_crash", run_id=task.run_id)
        return "crashed"
    except Abandon as signal:
        if execution.lost:
            log.warning("%s", signal.args[0] if signal.args else "lease lost")
            env.emit("lease_lost", run_id=task.run_id, task_id=fence.task_id)
            return "abandoned"
        log.warning("replaying run %s again: %s", task.run_id, signal)
        await store.execute(
            q.task_release(fence, delay_seconds=0, failed=False, event="run_replay_restarted")
        )
        return "released"
    except Exception as exc:
        if execution.run_status == "cancelled":
            await store.execute(q.task_settle(fence))
            return "cancelled"
        return await _handle_failure(task, spec, env, execution, exc)
    try:
        text = serialization.dumps(
            output, f"the result of workflow {spec.name!r}", env.max_payload_bytes
        )
    except SerializationError as exc:
        return await _fail(task, env, exc)
    leased, changed = await store.execute(q.run_complete(fence, text))
    if not leased:
        env.emit("lease_lost", run_id=task.run_id, task_id=fence.task_id)
        return "abandoned"
    if not changed:
        return "cancelled"
    env.emit("run_completed", run_id=task.run_id)
    return "completed"


async def _handle_failure(
    task: ClaimedTask,
    spec: WorkflowSpec,
    env: ExecutionEnv,
    execution: Execution,
    exc: Exception,
) -> str:
    cause: Exception = exc
    if isinstance(execution.fatal, Exception):
        cause = execution.fatal
    failures = task.failures + 1
    if isinstance(cause, _PERMANENT) or not spec.retry.should_retry(cause, failures):
        return await _fail(task, env, cause)
    delay = spec.retry.delay(failures)
    detail = serialization.error_json(serialization.error_record(cause, traceback.format_exc()))
    released = await env.store.execute(
        env.store.q.task_release(
            task.fence,
            delay_seconds=delay,
            failed=True,
            event="run_retry_scheduled",
            detail_json=detail,
        )
    )
    return "retrying" if released else "abandoned"


async def _fail(task: ClaimedTask, env: ExecutionEnv, exc: BaseException) -> str:
    tb = "".join(traceback.format_exception(exc))
    record = serialization.error_record(exc, tb)
    for attr in ("step", "position", "recorded", "requested"):
        if hasattr(exc, attr):
            record[attr] = getattr(exc, attr)
    leased, changed = await env.store.execute(
        env.store.q.run_fail(task.fence, serialization.error_json(record))
    )
    if not leased:
        env.emit("lease_lost", run_id=task.run_id, task_id=task.fence.task_id)
        return "abandoned"
    if not changed:
        return "cancelled"
    env.emit("run_failed", run_id=task.run_id, error=record["type"])
    return "failed"


def call_sync(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any]) -> Any:
    """From a workflow's worker thread, run ``coro`` on the engine loop and wait for it."""
    return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]
