"""The sync and async forms of one operation, derived from its single coroutine.

Every public operation that does I/O is written once, as a coroutine that runs
on the portal loop (where the pool lives). Its ``x_async`` form awaits it from
the caller's loop through ``Portal.run``; its ``x`` form blocks on it
through ``Portal.call``. Two helpers take an operation over a
``Core`` (``fn(core, ...)``, for the App's flat
surface); two take a method of an object that has a core (``RunHandle``); and
two derive the forms of an async iterator. Each runs the call inside
``client_faults``, where a fault of the database becomes
``DatabaseUnavailable``.

Every sync form refuses, at once, to run on a thread whose event loop is
running (``refuse_under_loop``): it would freeze that loop until it
returned. Sync steps and ``def`` workflows run on worker threads, which have
no running loop, and call the sync forms freely.

An operation given the caller's blocking psycopg connection (``conn=``) does
not run on the portal: driving that connection would stall the portal's loop,
and every other caller of the App with it, for as long as the caller's
transaction waits. Its sync form runs it on the calling thread instead (on a
loop of its own), its async form on a worker thread (``beside``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from perdure.api.core import Core, HasCore
from perdure.api.presenting import presents
from perdure.errors import BlockingCallInEventLoop, DatabaseUnavailable
from perdure.store.connect import DriverError, refusal
from perdure.store.store import reachable

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound=HasCore)
Op = Callable[Concatenate[Core, P], Coroutine[Any, Any, T]]

#: How the docs and messages name the object a form is called on.
_RECEIVERS = {"App": "app", "RunHandle": "run"}


def refuse_under_loop(form: Callable[..., Any], iterator: bool = False) -> None:
    """Raise BlockingCallInEventLoop if this thread runs an event loop, naming the async form."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop here: blocking is what the caller asked for
    owner, _, name = form.__qualname__.rpartition(".")
    receiver = _RECEIVERS.get(owner, owner.lower() or "app")
    if iterator:
        raise BlockingCallInEventLoop(
            f"for ... in {receiver}.{name}()", f"async for ... in {receiver}.{name}_async()"
        )
    raise BlockingCallInEventLoop(f"{receiver}.{name}()", f"await {receiver}.{name}_async()")


@contextlib.contextmanager
def client_faults() -> Iterator[None]:
    """The one boundary of every App call: a fault of the database (see
    ``perdure.store.connect.is_database_fault``) reaches the caller as
    ``DatabaseUnavailable`` with the server's message, and any other refusal
    of the server as ``DatabaseError`` (``PermissionDenied`` for a missing
    privilege): never as a driver's class, whichever connection it came from
    (the App's pool, a caller's connection, a call's own session)."""
    try:
        with reachable(DatabaseUnavailable):
            yield
    except DriverError as exc:
        raise refusal(exc) from exc


#: Whether a call's keyword arguments make it run off the portal.
Beside = Callable[[dict[str, Any]], bool]


def blocking(fn: Op[P, T], beside: Beside | None = None) -> Callable[Concatenate[HasCore, P], T]:
    """The sync form of ``fn(core, ...)``: run it on the portal and wait.

    When ``beside(kwargs)`` is true (the caller's blocking connection) it
    runs on the calling thread instead (see the module's docstring).
    """

    @presents(fn)
    def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        refuse_under_loop(call)
        core = self._core
        with client_faults():
            if beside is not None and beside(kwargs):
                return run_beside(fn(core, *args, **kwargs))
            return core.portal.call(fn(core, *args, **kwargs))

    return call


def awaiting(
    fn: Op[P, T],
    here: Beside | None = None,
    beside: Beside | None = None,
) -> Callable[Concatenate[HasCore, P], Coroutine[Any, Any, T]]:
    """The async form of ``fn(core, ...)``: await it running on the portal.

    When ``here(kwargs)`` is true (a caller's async connection, which belongs
    to the caller's loop) it runs on the caller's loop instead; when
    ``beside(kwargs)`` is true (the caller's blocking connection), on a
    worker thread, so that neither loop waits on that connection.
    """

    @presents(fn)
    async def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        core = self._core
        with client_faults():
            if here is not None and here(kwargs):
                return await fn(core, *args, **kwargs)
            if beside is not None and beside(kwargs):
                return await asyncio.to_thread(asyncio.run, fn(core, *args, **kwargs))
            return await core.portal.run(fn(core, *args, **kwargs))

    return call


def run_beside(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a loop of its own in the calling thread (a new thread under a loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    return run_on_thread(coro)


def blocking_method(
    fn: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], T]:
    """The sync form of a coroutine method of an object with a core."""

    @presents(fn)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        refuse_under_loop(call)
        with client_faults():
            return self._core.portal.call(fn(self, *args, **kwargs))

    return call


def awaiting_method(
    fn: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async form of a coroutine method of an object with a core."""

    @presents(fn)
    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with client_faults():
            return await self._core.portal.run(fn(self, *args, **kwargs))

    return call


class _Steps(Generic[T]):
    """An async iterator advanced one value at a time on the portal, from another thread or loop.

    A step left on the caller's side (Ctrl-C, a cancelled task, a timeout)
    may still run on the portal; closing cancels it and waits for its end
    first, since an async generator cannot be closed while a step of it runs.
    """

    def __init__(self, values: AsyncIterator[T]) -> None:
        self.values = values
        self.step: asyncio.Task[Any] | None = None

    async def next(self) -> T:
        """The next value (StopAsyncIteration at the end)."""
        self.step = asyncio.current_task()
        return await anext(self.values)

    async def close(self) -> None:
        """End the step still running, if any, then close the iterator."""
        step = self.step
        if step is not None and not step.done():
            step.cancel()
            await asyncio.wait([step])
        aclose = getattr(self.values, "aclose", None)
        if aclose is not None:
            await aclose()


def iterating(
    fn: Callable[Concatenate[Core, P], AsyncIterator[T]],
) -> Callable[Concatenate[HasCore, P], Iterator[T]]:
    """The sync form of an async iterator over a core: each next value fetched on the portal."""

    @presents(fn)
    def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        refuse_under_loop(call, iterator=True)  # at the first value asked for
        core = self._core
        steps = _Steps(fn(core, *args, **kwargs))
        ended = False
        try:
            while True:
                try:
                    with client_faults():
                        value = core.portal.call(steps.next())
                except StopAsyncIteration:
                    ended = True
                    return
                yield value
        finally:
            if not ended:  # left early: let the iterator clean up on the portal
                core.portal.call(steps.close())

    return call


def async_iterating(
    fn: Callable[Concatenate[Core, P], AsyncIterator[T]],
) -> Callable[Concatenate[HasCore, P], AsyncGenerator[T, None]]:
    """The async form of an async iterator over a core: each next value awaited on the portal."""

    @presents(fn)
    async def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[T, None]:
        core = self._core
        steps = _Steps(fn(core, *args, **kwargs))
        ended = False
        try:
            while True:
                try:
                    with client_faults():
                        value = await core.portal.run(steps.next())
                except StopAsyncIteration:
                    ended = True
                    return
                yield value
        finally:
            if not ended:  # left early: let the iterator clean up on the portal
                await core.portal.run(steps.close())

    return call


def here(fn: Op[P, T]) -> Callable[Concatenate[HasCore, P], Coroutine[Any, Any, T]]:
    """The async form of an operation that runs on the caller's loop (a worker does)."""

    @presents(fn)
    async def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with client_faults():
            return await fn(self._core, *args, **kwargs)

    return call


def in_new_loop(fn: Op[P, T]) -> Callable[Concatenate[HasCore, P], T]:
    """The sync form of an operation that needs a loop of its own in this thread."""

    @presents(fn)
    def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        refuse_under_loop(call)
        with client_faults():
            return asyncio.run(fn(self._core, *args, **kwargs))

    return call


def run_on_thread(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a loop of its own in a new thread and wait (safe under a running loop)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="perdure-drain")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def on_thread(fn: Op[P, T]) -> Callable[Concatenate[HasCore, P], T]:
    """The sync form of an operation that runs a worker inline: on a thread of its own."""

    @presents(fn)
    def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        refuse_under_loop(call)
        with client_faults():
            return run_on_thread(fn(self._core, *args, **kwargs))

    return call


def closing(fn: Op[[], None]) -> Callable[[HasCore], None]:
    """The sync form of the App's teardown: ``fn(core)`` on the portal, then the portal ends."""

    @presents(fn)
    def call(self: HasCore, /) -> None:
        core = self._core
        if core.portal.started:
            core.portal.call(fn(core))
        core.portal.close()

    return call


def async_closing(fn: Op[[], None]) -> Callable[[HasCore], Coroutine[Any, Any, None]]:
    """The async form of the App's teardown: the portal's end is awaited on a thread."""

    @presents(fn)
    async def call(self: HasCore, /) -> None:
        core = self._core
        if core.portal.started:
            await core.portal.run(fn(core))
        await asyncio.to_thread(core.portal.close)  # joins the portal's thread

    return call


def direct(fn: Callable[Concatenate[Core, P], T]) -> Callable[Concatenate[HasCore, P], T]:
    """A method for an operation without I/O (a declaration): ``fn(core, ...)`` at once."""

    @presents(fn)
    def call(self: HasCore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with client_faults():
            return fn(self._core, *args, **kwargs)

    return call
