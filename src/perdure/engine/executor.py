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
import contextvars
import dataclasses
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from perdure import errors
from perdure.engine import attempts, serialization, typed
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import ReplayEnd, StaleHistory, Suspend, Unwind
from perdure.engine.cursor import ReplayCursor, recorded_failure
from perdure.engine.deferred import DeferredCheckpoint
from perdure.engine.environment import ExecutionEnv, WorkflowSpec
from perdure.engine.retry import RetryPolicy
from perdure.engine.writer import FencedWriter
from perdure.errors import (
    Cancelled,
    NonDeterminismError,
    StepFailed,
    StepTimeout,
)
from perdure.steps import Snooze
from perdure.store.codec import Offloaded, opened
from perdure.store.loaders import Undecodable
from perdure.store.rows import ClaimedTask, Fenced
from perdure.store.writes import Checkpoint, Release
from perdure.types import Step, StepStatus

log = logging.getLogger("perdure.executor")
T = TypeVar("T")


#: A workflow definition whose body runs in an ``Execution``.
Spec = WorkflowSpec["Execution"]


class StepTaskDone(BaseException):
    """A step task executed its step: stop replaying the workflow."""


@dataclass(frozen=True)
class Rollback:
    """A compensation registered with ``ctx.on_rollback``: run if the run fails for good."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    retry: RetryPolicy | None


@dataclass(frozen=True)
class _Output:
    """How a transaction step records its output: encode and rebuild it, then checkpoint it."""

    what: str
    rebuild: Callable[[Any], Any]
    checkpoint: Callable[[str], Checkpoint]

    def encode(self, result: Any, max_bytes: int) -> tuple[str, Any]:
        """The output's JSON text and the value the workflow receives (its declared type)."""
        text, decoded = serialization.roundtrip(result, self.what, max_bytes)
        return text, self.rebuild(decoded)


@dataclass
class Execution:
    """The state of one task being executed: its checkpoints and its cursor."""

    task: ClaimedTask
    spec: Spec
    env: ExecutionEnv
    #: The recorded history, the position in it and the determinism guard.
    cursor: ReplayCursor
    loop: asyncio.AbstractEventLoop
    #: Every fenced write of this execution goes through it (engine.writer).
    writer: FencedWriter
    #: Set once a fenced write found another owner (or the heartbeat did).
    lease_lost: bool = False
    fatal: BaseException | None = None
    #: The run's status as of the last checkpoint: 'cancelled' or 'paused'
    #: stops the workflow at its next ctx call.
    run_status: str = "running"
    #: Values written to each stream so far in this execution (replay included).
    stream_seq: dict[str, int] = field(default_factory=dict)
    #: Set when executing a step task: the position of its step.
    step_task_position: int | None = None
    #: Compensations registered so far, in registration order.
    rollbacks: list[Rollback] = field(default_factory=list)
    #: The failure a compensating run recorded, while its replay must run
    #: nothing new (engine.compensation); None otherwise.
    failure: dict[str, Any] | None = None
    #: What the body and its update handlers share (``ctx.state``), rebuilt by replay.
    state: dict[str, Any] = field(default_factory=dict)
    #: The update handlers of the workflow (engine.updates), set when its body starts.
    update_handlers: Any = None
    #: The run's accepted updates by wait position, read once (engine.updates).
    applied_updates: dict[int, list[Any]] | None = None
    #: The accepted update whose handler runs now (``ctx.reply`` answers it), or None.
    current_update: dict[str, Any] | None = None
    #: A completed step's checkpoint not written yet (see engine.deferred).
    deferred: DeferredCheckpoint = field(init=False)

    def __post_init__(self) -> None:
        self.deferred = DeferredCheckpoint(
            self.loop, self.writer.record, self.recorded, self.writer.holds
        )

    # Replay ------------------------------------------------------------------

    @property
    def replay_only(self) -> bool:
        """Whether this execution replays recorded history only (check-replay: no store)."""
        return self.env.db is None

    def check_alive(self) -> None:
        """Stop user code at its next ``ctx`` call once the task is lost or doomed."""
        if self.lease_lost or self.task.fence.task_id in self.env.lost_tasks:
            self.lose_lease()
        if self.fatal is not None:
            raise self.fatal
        if self.run_status == "cancelled":
            raise Cancelled(self.task.run_id)

    def note_status(self, run_status: str) -> None:
        """The run's status as last read (a 'cancelled' one stops it at its next ctx call)."""
        self.run_status = run_status

    def next_stream_seq(self, key: str) -> int:
        """The sequence number of the next value written to stream ``key``."""
        self.stream_seq[key] = self.stream_seq.get(key, 0) + 1
        return self.stream_seq[key]

    def on_rollback(self, rollback: Rollback) -> None:
        """Register a compensation, to run if the run fails for good."""
        self.rollbacks.append(rollback)

    def compensate(self) -> None:
        """The compensations are the new work this run does now: let them run."""
        self.failure = None

    def doom(self, error: BaseException) -> NoReturn:
        """Stop the run for good with ``error``, even if the workflow catches it."""
        self.fatal = error
        raise error

    def lose_lease(self) -> NoReturn:
        """Another worker owns the task now: stop executing it (the lease is lost)."""
        self.lease_lost = True
        fence = self.task.fence
        raise Unwind(errors.LeaseLost(fence.task_id, fence.worker_id, fence.attempt))

    def fenced(self, result: Fenced, stale: str = "") -> Fenced:
        """Check a fenced write's answer: stop on a lost lease or, when ``stale`` says
        what was already there, on stale history; note the run's status."""
        if result.run_status:
            self.note_status(result.run_status)
        if not result.leased:
            self.lose_lease()
        if stale and not result.written:
            raise StaleHistory(f"run {self.task.run_id}: {stale}")
        return result

    def end_of_history(self) -> None:
        """Stop where the history ends when only replaying (check-replay, a step task),
        or, in a compensating run, with its failure (nothing new runs)."""
        if self.replay_only or self.step_task_position is not None:
            raise ReplayEnd(self.cursor.position)
        if self.failure is not None:
            position, name = self.cursor.requested
            if self.failure.get("type") == "LeaseExpired":
                raise errors.LeaseExpired(self.task.run_id, self.failure, position, name)
            raise errors.RunFailed(self.task.run_id, self.failure, "compensating")

    async def gate(self) -> None:
        """Run before every ctx call: stop if lost or cancelled, park if paused."""
        if self.deferred.busy:
            await self.deferred.flush_now()
        self.check_alive()
        if self.run_status == "paused":
            await self.release(0.0, event="run_paused_at_step", paused=True)

    async def release(
        self, delay: float, *, event: str, detail_json: str | None = None, paused: bool = False
    ) -> NoReturn:
        """Hand the task back, due after ``delay`` s, and stop executing (Suspend)."""
        await self.deferred.flush_now()
        release = Release(
            self.task.fence, event, delay_seconds=delay, detail_json=detail_json, paused=paused
        )
        if not await self.writer.release(release):
            self.lose_lease()
        raise Suspend()

    def advance(
        self, name: str, kind: str = "step", *, lazy: bool = False
    ) -> tuple[int, Step | None]:
        """Take the next position for step ``name``: its checkpoint, if any; the guard.

        An offloaded output read by the claim unfetched is fetched here, unless
        ``lazy`` (a gather's results, opened when the workflow reads them).
        """
        self.check_alive()
        try:
            position, recorded = self.cursor.advance(name, kind)
        except NonDeterminismError as guard:
            self.doom(guard)
        if recorded is not None and not lazy and type(recorded.output) is Offloaded:
            recorded = dataclasses.replace(recorded, output=self.output_of(recorded))
        return position, recorded

    def output_of(self, recorded: Step) -> Any:
        """``recorded``'s output, fetched now if it was offloaded (blocking); the run
        stops for good (UndecodablePayload) when it cannot be read."""
        value = opened(recorded.output)
        if isinstance(value, Undecodable):
            where = f"the output of step {recorded.name!r} at position {recorded.position}"
            self.doom(errors.UndecodablePayload(self.task.run_id, where, value.reason))
        return value

    def replayed(self, recorded: Step) -> Any:
        """A recorded final checkpoint's output, or its failure raised (StepFailed)."""
        return self.cursor.replayed(recorded)

    @staticmethod
    def recorded_failure(recorded: Step) -> StepFailed:
        """The StepFailed a failed step's checkpoint records."""
        return recorded_failure(recorded)

    # Steps -------------------------------------------------------------------

    async def _run_step(
        self,
        name: str,
        kind: str,
        retry: RetryPolicy | None,
        body: Callable[[Attempt], Awaitable[tuple[str | None, Any]]],
        reserved: tuple[int, Step | None] | None = None,
        rebuild: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Replay step ``name`` from its checkpoint, or run ``body`` and record it.

        ``body`` returns ``(output_json, decoded)``; when ``output_json`` is None
        the body wrote its checkpoint itself (a transaction step). A failure of
        the body is the step's failure; a failure to checkpoint is not.
        ``reserved`` is the position (and checkpoint) a gather already took.
        ``rebuild`` turns a recorded output into the step's declared type on
        replay; ``body`` applies it itself, before its checkpoint.
        """
        if reserved is None:
            await self.gate()
            position, recorded = self.advance(name, kind)
        else:
            position, recorded = reserved
        if recorded is not None and recorded.status not in _UNFINISHED:
            replayed = self.replayed(recorded)
            return replayed if rebuild is None else rebuild(replayed)
        if position != self.step_task_position:
            self.end_of_history()
        attempt = Attempt(
            position,
            name,
            kind,
            (recorded.attempts if recorded is not None else 0) + 1,
            self.env.store.statements.clock.wall_now(),
        )
        return await attempts.run(self, attempt, retry, body)

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        timeout: float | None = None,
        *,
        kind: str = "step",
        reserved: tuple[int, Step | None] | None = None,
        returns: typed.Hint | None = None,
    ) -> Any:
        """Run a plain step once per run (at least once across crashes).

        Its output is rebuilt as ``returns`` (default: ``fn``'s return
        annotation) declares, the first time as on every replay.
        """
        what = f"the output of step {name!r}"
        rebuild = functools.partial((returns or typed.return_hint(fn)).rebuild, what=what)

        async def body(attempt: Attempt) -> tuple[str | None, Any]:
            if timeout is None:
                result = await self.call(fn, args, kwargs)
            else:
                try:
                    result = await asyncio.wait_for(self.call(fn, args, kwargs), timeout)
                except TimeoutError:
                    raise StepTimeout(name, timeout) from None
            if isinstance(result, Snooze):
                raise result
            limit = self.env.max_payload_bytes
            text, decoded = await serialization.roundtrip_async(result, what, limit)
            return text, rebuild(decoded)

        return await self._run_step(name, kind, retry, body, reserved, rebuild)

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
        rebuild = functools.partial(typed.return_hint(fn).rebuild, what=what)

        async def body(attempt: Attempt) -> tuple[str | None, Any]:
            def checkpoint(text: str) -> Checkpoint:
                return self.checkpoint_record(attempt, "completed", text)

            output = _Output(what, rebuild, checkpoint)
            if inspect.iscoroutinefunction(fn):
                decoded = await self._transaction_async(fn, args, kwargs, output)
            else:
                decoded = await self.loop.run_in_executor(
                    self.env.threads,
                    functools.partial(self._transaction_sync, fn, args, kwargs, output),
                )
            return None, decoded

        return await self._run_step(name, "transaction", retry, body, rebuild=rebuild)

    async def _transaction_async(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: _Output,
    ) -> Any:
        async with self.writer.transaction() as (conn, ours):
            if not ours:
                self.lose_lease()
            result = await fn(conn, *args, **kwargs)
            text, decoded = output.encode(result, self.env.max_payload_bytes)
            # Raising here rolls the transaction back with its checkpoint.
            result = self.fenced(await self.writer.record(output.checkpoint(text), conn))
            if not result.written:
                # A final checkpoint is already there: this execution stops as
                # if its lease were lost (rolling the step back), and lets the
                # lease lapse.
                self.lose_lease()
        return decoded

    def _transaction_sync(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: _Output,
    ) -> Any:
        with self.writer.transaction_sync() as (conn, ours):
            if not ours:
                self.lose_lease()
            result = fn(conn, *args, **kwargs)
            text, decoded = output.encode(result, self.env.max_payload_bytes)
            # Raising here rolls the transaction back with its checkpoint.
            result = self.fenced(self.writer.record_sync(output.checkpoint(text), conn))
            if not result.written:
                # A final checkpoint is already there: this execution stops as
                # if its lease were lost (rolling the step back), and lets the
                # lease lapse.
                self.lose_lease()
        return decoded

    async def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Call a step's function: on the loop if async, else on a worker thread."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        # Plain functions run on the worker's thread pool so a blocking step
        # does not stall the event loop that heartbeats and other runs share.
        # They run in a copy of this context, so that the step's log fields
        # and trace span are current in the thread too.
        result = await self.loop.run_in_executor(
            self.env.threads,
            functools.partial(contextvars.copy_context().run, fn, *args, **kwargs),
        )
        if inspect.isawaitable(result):
            result = await result
        return result

    def ends_step_task(self, attempt: Attempt, status: str) -> bool:
        """Whether this checkpoint is the final one of the step task being executed."""
        return attempt.position == self.step_task_position and status in ("completed", "failed")

    def checkpoint_record(
        self,
        attempt: Attempt,
        status: str,
        output_json: str | None,
        error_json: str | None = None,
        *,
        event_key: str | None = None,
        stream_seq: int | None = None,
        stream_closed: bool = False,
    ) -> Checkpoint:
        """``attempt``'s outcome with ``status`` as the record of its fenced write.

        A step task's final checkpoint also ends its task and may wake the
        run (at once on a failure: gathers fail fast); any other extends the
        task's lease.
        """
        return attempt.outcome(
            self.task.fence,
            status,
            output_json,
            error_json,
            lease_seconds=self.env.lease_seconds,
            event_key=event_key,
            stream_seq=stream_seq,
            stream_closed=stream_closed,
            ends_task=self.ends_step_task(attempt, status),
        )

    async def checkpoint(
        self,
        attempt: Attempt,
        status: str,
        output_json: str | None,
        error_json: str | None,
        conn: Any = None,
        **publish: Any,
    ) -> None:
        """Write a checkpoint (on ``conn``, in its transaction, if given); stop if not ours."""
        if self.deferred.busy:
            await self.deferred.flush_now()
        checkpoint = self.checkpoint_record(attempt, status, output_json, error_json, **publish)
        await self.record(checkpoint, conn)

    async def record(self, checkpoint: Checkpoint, conn: Any = None) -> None:
        """Commit ``checkpoint`` (on ``conn``, in its transaction, if given); stop if
        the lease is lost or the history was stale."""
        self.recorded(checkpoint, await self.writer.record(checkpoint, conn))

    def recorded(self, checkpoint: Checkpoint, result: Fenced) -> None:
        """Check the answer to ``checkpoint``'s write: stop if the lease is lost or the
        history was stale; else tell the observer it is checkpointed."""
        # Not written with the lease ours: the history this replay started
        # from was stale; the task is handed back and replayed from the real one.
        self.fenced(result, f"position {checkpoint.position} was already checkpointed")
        self.env.observer.step_checkpointed(self.task.run_id, checkpoint.name, checkpoint.status)


_UNFINISHED = (StepStatus.RETRYING, StepStatus.PENDING, StepStatus.WAITING)


def call_sync(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any]) -> Any:
    """From a workflow's worker thread, run ``coro`` on the engine loop and wait for it."""
    return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]
