"""The ``ctx`` a workflow receives: durable steps and database transactions.

Async workflows get a [`Context`][perdure.Context], whose methods are awaited. Plain
``def`` workflows run on a worker thread and get a [`SyncContext`][perdure.SyncContext] with the
same methods that block instead; both drive one engine execution.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from perdure.api.event_match import event_match
from perdure.api.presenting import owned, presents
from perdure.engine import arguments, children, event_waits, parallel, recorded, typed, waits
from perdure.engine.arguments import validate_name
from perdure.engine.executor import Execution, Rollback, call_sync
from perdure.engine.retry import RetryPolicy, check_policy
from perdure.errors import ConfigurationError, UnknownWorkflow
from perdure.ids import new_run_id
from perdure.steps import StepCall
from perdure.types import EmittedEvent

T = TypeVar("T")
P = ParamSpec("P")


class _Base:
    def __init__(self, execution: Execution) -> None:
        self._execution = execution

    @property
    def run_id(self) -> str:
        """The id of the run being executed."""
        return self._execution.task.run_id

    @property
    def workflow(self) -> str:
        """The workflow's name."""
        return self._execution.spec.name

    @property
    def version(self) -> int:
        """The workflow version this run is pinned to."""
        return self._execution.spec.version

    @property
    def attempt(self) -> int:
        """How many times this run's task has been claimed, this claim included."""
        return self._execution.task.fence.attempt

    @property
    def worker_id(self) -> str:
        """The worker executing this run now."""
        return self._execution.task.fence.worker_id

    @property
    def scheduled_at(self) -> datetime | None:
        """The tick this run covers (aware, UTC) if a schedule started it, else None.

        The same on every replay and retry: a report uses it, not the clock,
        to know which period it covers.
        """
        return self._execution.task.scheduled_at

    @property
    def schedule(self) -> str | None:
        """The name of the schedule that started this run, if one did."""
        return self._execution.task.schedule

    def _sleep(self, delay: float | timedelta) -> Coroutine[Any, Any, None]:
        return waits.sleep(self._execution, seconds=arguments.seconds("sleep delay", delay))

    def _sleep_until(self, when: datetime) -> Coroutine[Any, Any, None]:
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise ConfigurationError("sleep_until takes a timezone-aware datetime")
        return waits.sleep(self._execution, until=when)

    def _call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        timeout: float | None,
    ) -> StepCall[Any]:
        _check_step(name, fn, retry)
        timeout = arguments.optional_seconds(f"step {name!r}: timeout", timeout, positive=True)
        return StepCall(self._execution, name, fn, args, kwargs, retry, timeout)

    def _map_calls(
        self,
        name: str,
        fn: Callable[..., Any],
        items: Iterable[Any],
        retry: RetryPolicy | None,
        timeout: float | None,
    ) -> parallel.MappedSteps:
        self._call(name, fn, (), {}, retry, timeout)  # the same checks as one step
        if isinstance(items, str | bytes | dict):
            raise ConfigurationError(f"map {name!r}: items must be a list of inputs, not {items!r}")
        try:
            listed = list(items)
        except TypeError:
            raise ConfigurationError(
                f"map {name!r}: items must be iterable, not {type(items).__name__}"
            ) from None
        return parallel.MappedSteps(self._execution, name, fn, listed, retry, timeout)

    def _workflow_name(self, workflow: str | Callable[..., Any]) -> str:
        if isinstance(workflow, str) or not callable(workflow):
            return validate_name("workflow", workflow)
        for (name, _), spec in self._execution.env.specs.items():
            if getattr(spec, "fn", None) is workflow:
                return name
        raise UnknownWorkflow(getattr(workflow, "__name__", repr(workflow)))

    def branch(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> StepCall[Any]:
        """Describe step ``name`` without running it, for ``gather``.

        In an ``async def`` workflow ``ctx.step(...)`` does the same; in a plain
        ``def`` workflow ``ctx.step`` runs at once, so steps run in parallel (each
        its own step task) are written ``ctx.gather(ctx.branch("a", f), ctx.branch("b", g))``.
        """
        return self._call(name, fn, args, kwargs, retry, timeout)

    def on_rollback(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        """Register ``fn(*args, **kwargs)`` to undo what the run did so far (a saga).

        If the run fails for good, every registered compensation runs, newest
        first, each as a durable step ``compensate:<name>`` (retried per
        ``retry``); the run ends 'compensated', or 'compensation_failed' if one
        of them failed too. Register right after the step it undoes.
        """
        if not callable(fn):
            raise ConfigurationError(f"on_rollback takes a callable, not {fn!r}")
        if name is not None:
            arguments.label("rollback name", name)
        check_policy("retry", retry)
        label = str(name or getattr(fn, "__name__", None) or "rollback")
        self._execution.on_rollback(Rollback(label, fn, args, kwargs, retry))

    def _wait(
        self, name: str, timeout: float | timedelta | None, kind: Any = None
    ) -> Coroutine[Any, Any, Any]:
        validate_name("signal", name)
        seconds = arguments.optional_seconds("signal timeout", timeout)
        return waits.wait_for_signal(self._execution, name, seconds, typed.of(kind))

    def _wait_event(
        self,
        name: str,
        match: dict[str, Any] | None,
        lookback: float | timedelta,
        timeout: float | timedelta | None,
    ) -> Coroutine[Any, Any, EmittedEvent]:
        validate_name("event", name)
        wanted = event_match(name, match, self._execution.env.max_payload_bytes)
        back = arguments.seconds("event lookback", lookback)
        seconds = arguments.optional_seconds("event timeout", timeout)
        return event_waits.wait_for_event(self._execution, name, wanted, back, seconds)

    def _publish(
        self, kind: str, key: str, value: Any, closed: bool = False
    ) -> Coroutine[Any, Any, None]:
        arguments.label(f"{kind} key", key)
        return waits.publish(self._execution, kind, key, value, closed=closed)

    def _gather(
        self, calls: Sequence[StepCall[Any]], return_exceptions: bool
    ) -> Coroutine[Any, Any, Sequence[Any]]:
        arguments.flag("return_exceptions", return_exceptions)
        return parallel.gather(self._execution, calls, return_exceptions=return_exceptions)

    def _start_child(
        self, workflow: str | Callable[..., Any], input: Any, key: str | None, version: int | None
    ) -> tuple[str, Coroutine[Any, Any, str]]:
        name = self._workflow_name(workflow)
        key = arguments.optional_text("child key", key, max_length=arguments.MAX_KEY_LENGTH)
        if version is not None:
            arguments.integer("version", version, minimum=1)
        started = children.start_child(
            self._execution, name, input, key=key, version=version, run_id=new_run_id()
        )
        return name, started

    def _transaction(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
    ) -> Coroutine[Any, Any, Any]:
        _check_step(name, fn, retry)
        return self._execution.transaction(name, fn, args, kwargs, retry)


def _patch_id(patch_id: object) -> str:
    """A patch id: printable text that fits a step name, or ConfigurationError."""
    limit = arguments.MAX_LABEL_LENGTH - len(recorded.PATCH)
    return arguments.text("a patch id", patch_id, max_length=limit, control=False)


def _check_step(name: object, fn: object, retry: object) -> None:
    """Refuse a bad step name, a step that is not callable or a retry that is no policy."""
    arguments.label("a step name", name)
    if not callable(fn):
        raise ConfigurationError(f"step {name!r}: {fn!r} is not callable")
    check_policy(f"step {name!r}: retry", retry)


class ChildRun:
    """A child run started by ``ctx.start_child`` in an ``async def`` workflow."""

    def __init__(self, execution: Execution, run_id: str, workflow: str) -> None:
        """A handle on child run ``run_id`` of ``workflow``."""
        self._execution = execution
        self.run_id = run_id
        self.workflow = workflow

    async def result(self) -> Any:
        """Wait durably for the child to finish; its output, or ChildFailed."""
        return await children.child_result(self._execution, self.run_id, self.workflow)


class _Executing(Protocol):
    """What a blocking form needs of its object: the execution whose loop runs the async form."""

    _execution: Execution


A = TypeVar("A")
B = TypeVar("B", bound=_Executing)
R = TypeVar("R")


def _derive(
    fn: Callable[Concatenate[A, P], Awaitable[T]],
    receiver: Callable[[B], A],
    then: Callable[[T], R],
    returns: str | None = None,
) -> Callable[Concatenate[B, P], R]:
    """The blocking form of the async method ``fn``, for a workflow's worker thread.

    It awaits ``fn`` on ``receiver(self)`` on the execution's loop while the
    thread waits, and returns what ``then`` makes of its value (annotated
    ``returns`` when that is not what ``fn`` returns).
    """

    @presents(fn)
    def call(self: B, /, *args: P.args, **kwargs: P.kwargs) -> R:
        async def run() -> R:
            return then(await fn(receiver(self), *args, **kwargs))

        result: R = call_sync(self._execution.loop, run())
        return result

    if returns is not None:
        signature = inspect.signature(call)
        call.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return call


def _same(value: T) -> T:
    return value


@owned
class SyncChildRun(ChildRun):
    """A child run started by ``ctx.start_child`` in a plain ``def`` workflow."""

    result = _derive(ChildRun.result, _same, _same)


class Context(_Base):
    """The durable API of an ``async def`` workflow."""

    async def sleep(self, delay: float | timedelta) -> None:
        """Wait durably for ``delay`` (seconds or a timedelta) without holding a worker.

        The run parks with its wake time in the queue; a worker restart, or no
        worker at all during the wait, changes nothing.
        """
        await self._sleep(delay)

    async def sleep_until(self, when: datetime) -> None:
        """Wait durably until the timezone-aware datetime ``when``."""
        await self._sleep_until(when)

    async def now(self) -> datetime:
        """The current time (aware, UTC), recorded: every replay returns the same time.

        Use it instead of ``datetime.now()`` in a workflow body, whose replays
        would otherwise see another time. It takes a position in the history
        like a step (named ``ctx.now``); a test's ``VirtualClock`` sets it.
        """
        return await recorded.now(self._execution)

    async def random(self) -> float:
        """A random float in [0.0, 1.0), recorded: every replay returns the same number."""
        return await recorded.random_float(self._execution)

    async def uuid4(self) -> uuid.UUID:
        """A random UUID (version 4), recorded: every replay returns the same one."""
        return await recorded.uuid4(self._execution)

    async def patched(self, patch_id: str) -> bool:
        """True where the run takes the new code of patch ``patch_id``, False where
        it replays a history recorded before the patch.

        Change a running workflow's code in place, without a new version::

            if await ctx.patched("send-receipt"):
                await ctx.step("receipt", send_receipt, order)   # the new code
            else:
                ...                                              # the old code

        A run that reaches the call on the new code records a marker (step
        ``ctx.patched:<patch_id>``) and takes the new code path, on every replay
        too; a run whose history went past this point before the deploy takes
        the old one. ``perdure check-replay`` says when no open run needs the
        old code path any more; see docs/versioning.md.
        """
        return await recorded.patched(self._execution, _patch_id(patch_id))

    async def deprecate_patch(self, patch_id: str) -> None:
        """Retire patch ``patch_id`` once no open run needs its old code path.

        Replace ``if await ctx.patched(id): new else: old`` by
        ``await ctx.deprecate_patch(id)`` followed by the new code: runs that
        recorded the marker replay past it, new runs record nothing. Remove the
        call once no open run holds the marker (``perdure check-replay`` fails
        on a run that does).
        """
        await recorded.deprecate_patch(self._execution, _patch_id(patch_id))

    @overload
    async def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any: ...

    @overload
    async def wait_for_signal(
        self, name: str, timeout: float | timedelta | None = None, *, type: type[T]
    ) -> T: ...

    async def wait_for_signal(
        self, name: str, timeout: float | timedelta | None = None, *, type: Any = None
    ) -> Any:
        """Wait durably for the next signal ``name``; return its payload.

        Signals sent before the run gets here are kept and delivered in order,
        one per wait. After ``timeout`` (seconds or timedelta; None waits
        forever) raises [`SignalTimeout`][perdure.errors.SignalTimeout]. With ``type`` (a
        Pydantic model, a dataclass, ``list[Model]``...) the payload is
        rebuilt as that type (InvalidPayload if it does not fit).
        """
        return await self._wait(name, timeout, type)

    async def wait_for_event(
        self,
        name: str,
        match: dict[str, Any] | None = None,
        *,
        lookback: float | timedelta = 0.0,
        timeout: float | timedelta | None = None,
    ) -> EmittedEvent:
        """Wait durably for an emitted event ``name`` whose payload contains ``match``.

        ``match`` is a JSON object the payload must contain (PostgreSQL's
        ``payload @> match``: ``{"order_id": 9182}`` matches a payload with
        that and any other fields); None matches every event of the name. An
        event emitted up to ``lookback`` (seconds or timedelta) before the
        wait began counts too. Each event wakes a run once: a second wait
        takes the next matching event. After ``timeout`` (None waits forever)
        raises [`EventWaitTimeout`][perdure.errors.EventWaitTimeout]. Returns the
        [`EmittedEvent`][perdure.EmittedEvent], the same on every replay.
        """
        return await self._wait_event(name, match, lookback, timeout)

    async def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for ``app.get_event(run_id, key)`` to read."""
        await self._publish("event", key, value)

    async def write_stream(self, key: str, value: Any) -> None:
        """Append ``value`` to the run's stream ``key`` (exactly once per position)."""
        await self._publish("stream", key, value)

    async def close_stream(self, key: str) -> None:
        """End stream ``key``: readers stop after the values written so far."""
        await self._publish("stream", key, None, closed=True)

    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> StepCall[T]: ...

    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> StepCall[T]: ...

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> StepCall[Any]:
        """Run ``fn(*args, **kwargs)`` as the checkpointed step ``name`` (``await`` it).

        The first time the run reaches this step, ``fn`` runs (a plain
        function on a worker thread) and its JSON output is recorded; on every
        replay the recorded output is returned and ``fn`` is not called. An
        ordinary exception is retried per ``retry`` (default: 3 attempts with
        backoff); ``PermanentError`` or exhausted attempts raise
        [`StepFailed`][perdure.errors.StepFailed] into the workflow. ``timeout`` (seconds)
        fails an attempt that runs longer with [`StepTimeout`][perdure.errors.StepTimeout],
        retried like any error (a plain ``def`` step's thread cannot be
        stopped: it runs on, and its result is ignored). Pass several
        un-awaited steps to [`gather`][perdure.Context.gather] to run them in parallel.
        """
        return self._call(name, fn, args, kwargs, retry, timeout)

    async def gather(self, *calls: StepCall[Any], return_exceptions: bool = False) -> Sequence[Any]:
        """Run steps in parallel, on any workers; return their results in order.

        ``a, b = await ctx.gather(ctx.step("a", f), ctx.step("b", g))``. Each
        step becomes a task of its own that any worker may claim; the run
        waits without holding a worker slot and resumes when all are done.
        Fail-fast: the first step to fail for good raises its
        [`StepFailed`][perdure.errors.StepFailed] here at once (the others finish and are
        recorded). With ``return_exceptions=True`` it waits for all and puts
        StepFailed instances in place of the failed steps' results. Offloaded
        results come as a sequence fetching each when read (see ``map``).
        """
        return await self._gather(calls, return_exceptions)

    async def map(
        self,
        name: str,
        fn: Callable[..., Any],
        items: Iterable[Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> Sequence[Any]:
        """Run ``fn(item)`` for every item as step tasks ``name[0]``, ``name[1]``, ...

        The same as [`gather`][perdure.Context.gather] over one step per item, keyed by index.
        The results are a list, unless some were offloaded to an object store
        (see docs/large-payloads.md): then a sequence that fetches each result
        when it is read and keeps none of them.
        """
        calls = self._map_calls(name, fn, items, retry, timeout)
        # MappedSteps builds a step only when read: a step task
        # replaying the map reads its own, not all n.
        return await self._gather(calls, return_exceptions)

    async def start_child(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
    ) -> ChildRun:
        """Start a child run of ``workflow`` (once per run: replays return the same child).

        The child's key is derived from this run and the call's position
        unless ``key`` is given. ``await child.result()`` waits durably for it.
        """
        name, started = self._start_child(workflow, input, key, version)
        return ChildRun(self._execution, await started, name)

    @overload
    async def transaction(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def transaction(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    async def transaction(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(conn, *args, **kwargs)`` exactly once, in the checkpoint's transaction.

        ``conn`` is a psycopg connection inside an open transaction on the
        perdure database (an ``AsyncConnection`` for an ``async def`` fn, a
        ``Connection`` for a plain one). The step's checkpoint is written in
        that same transaction, so its database effects commit exactly once.
        """
        return await self._transaction(name, fn, args, kwargs, retry)


def _blocking(
    fn: Callable[Concatenate[Context, P], Awaitable[T]],
) -> Callable[Concatenate[SyncContext, P], T]:
    """The blocking form of a ``Context`` method, for a workflow's worker thread."""
    return _derive(fn, _async_context, _same)


def _async_context(ctx: SyncContext) -> Context:
    return ctx._context


def _sync_child(child: ChildRun) -> SyncChildRun:
    return SyncChildRun(child._execution, child.run_id, child.workflow)


@owned
class SyncContext(_Base):
    """The durable API of a plain ``def`` workflow: [`Context`][perdure.Context], blocking.

    Each method is [`Context`][perdure.Context]'s, run on the execution's loop while the
    workflow's thread waits. ``ctx.step`` runs the step at once, so parallel
    steps are written ``ctx.gather(ctx.branch("a", f), ctx.branch("b", g))``.
    """

    def __init__(self, execution: Execution) -> None:
        """The blocking context of ``execution``."""
        super().__init__(execution)
        self._context = Context(execution)

    now = _blocking(Context.now)
    random = _blocking(Context.random)
    uuid4 = _blocking(Context.uuid4)
    patched = _blocking(Context.patched)
    deprecate_patch = _blocking(Context.deprecate_patch)
    sleep = _blocking(Context.sleep)
    sleep_until = _blocking(Context.sleep_until)
    wait_for_signal = _blocking(Context.wait_for_signal)
    wait_for_event = _blocking(Context.wait_for_event)
    set_event = _blocking(Context.set_event)
    write_stream = _blocking(Context.write_stream)
    close_stream = _blocking(Context.close_stream)
    step = _blocking(Context.step)
    gather = _blocking(Context.gather)
    map = _blocking(Context.map)
    transaction = _blocking(Context.transaction)
    start_child = _derive(Context.start_child, _async_context, _sync_child, "SyncChildRun")
