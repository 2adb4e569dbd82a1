"""The ``ctx`` a workflow receives: durable steps and database transactions.

Async workflows get a [`Context`][perdure.Context], whose methods are awaited. Plain
``def`` workflows run on a worker thread and get a [`SyncContext`][perdure.SyncContext] with the
same methods that block instead; both drive one engine execution.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar, overload

from perdure.api.blocking import derive, same
from perdure.api.child_run import ChildRun, SyncChildRun
from perdure.api.context_base import ContextBase
from perdure.api.presenting import owned
from perdure.engine import recorded
from perdure.engine import updates as _updates
from perdure.engine.continuing import continue_as_new as _continue_as_new
from perdure.engine.executor import Execution
from perdure.engine.retry import RetryPolicy
from perdure.steps import StepCall
from perdure.types import EmittedEvent, Winner

T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["ChildRun", "Context", "SyncChildRun", "SyncContext"]


class Context(ContextBase):
    """The durable API of an ``async def`` workflow."""

    async def continue_as_new(self, input: Any, *, version: str | None = None) -> NoReturn:
        """End this run as *continued* and start its successor with ``input``, in one write:
        the same workflow and key, this run's unconsumed signals, an empty history. It does
        not return. ``version="newest"`` moves the successor to the newest registered version.
        """
        await _continue_as_new(self._execution, input, version)

    async def reply(self, value: Any) -> None:
        """In an update handler: send the caller ``value`` as the update's reply now,
        while the handler (and the run) go on.

        The caller of ``app.update`` gets ``value`` at once; what the handler
        returns after is not a second reply, nor is an exception it raises
        after. The reply is written once: a replay passes the call again and
        writes nothing. Outside an update handler, or a second time in one,
        it raises WorkflowDefinitionError.
        """
        await _updates.reply(self._execution, value)

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
        return await recorded.patched(self._execution, recorded.patch_id(patch_id))

    async def deprecate_patch(self, patch_id: str) -> None:
        """Retire patch ``patch_id`` once no open run needs its old code path.

        Replace ``if await ctx.patched(id): new else: old`` by
        ``await ctx.deprecate_patch(id)`` followed by the new code: runs that
        recorded the marker replay past it, new runs record nothing. Remove the
        call once no open run holds the marker (``perdure check-replay`` fails
        on a run that does).
        """
        await recorded.deprecate_patch(self._execution, recorded.patch_id(patch_id))

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

    async def wait_first(self, /, **members: Any) -> Winner:
        """Wait durably for the first of several things; which one fired, with its value.

        Each keyword names a member: ``ctx.signal(name)``, ``ctx.event(name,
        match)``, ``ctx.timer(hours=24)``, ``ctx.update(name)``, or a child run
        from [`start_child`][perdure.Context.start_child]::

            first = await ctx.wait_first(
                approve=ctx.signal("approve"),
                reject=ctx.event("order.rejected", match={"order": 9}),
                escalate=ctx.timer(hours=24),
            )
            if first.name == "approve": ...

        Returns a [`Winner`][perdure.Winner] (``.name``, ``.value``), the same
        on every replay. Of members there at once, the first written wins; a
        timer wins only when nothing else is there. The losers are left as
        they were: a signal stays for a later wait, an event for a later
        wait, a child keeps running. A child that ends without completing
        raises [`ChildFailed`][perdure.errors.ChildFailed].
        """
        return await self._wait_first(members)

    async def wait_all(self, /, **members: Any) -> dict[str, Any]:
        """Wait durably until every member fired; their values by name (in the order
        written). Members as for [`wait_first`][perdure.Context.wait_first]; a timer
        member makes the wait last at least that long."""
        return await self._wait_all(members)

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
    return derive(fn, _async_context, same)


def _async_context(ctx: SyncContext) -> Context:
    return ctx._context


def _sync_child(child: ChildRun) -> SyncChildRun:
    return SyncChildRun(child._execution, child.run_id, child.workflow)


@owned
class SyncContext(ContextBase):
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
    continue_as_new = _blocking(Context.continue_as_new)
    random = _blocking(Context.random)
    uuid4 = _blocking(Context.uuid4)
    patched = _blocking(Context.patched)
    deprecate_patch = _blocking(Context.deprecate_patch)
    reply = _blocking(Context.reply)
    sleep = _blocking(Context.sleep)
    sleep_until = _blocking(Context.sleep_until)
    wait_for_signal = _blocking(Context.wait_for_signal)
    wait_for_event = _blocking(Context.wait_for_event)
    wait_first = _blocking(Context.wait_first)
    wait_all = _blocking(Context.wait_all)
    set_event = _blocking(Context.set_event)
    write_stream = _blocking(Context.write_stream)
    close_stream = _blocking(Context.close_stream)
    step = _blocking(Context.step)
    gather = _blocking(Context.gather)
    map = _blocking(Context.map)
    transaction = _blocking(Context.transaction)
    start_child = derive(Context.start_child, _async_context, _sync_child, "SyncChildRun")
