"""The ``ctx`` a workflow receives: durable steps and database transactions.

Async workflows get a :class:`Context`, whose methods are awaited. Plain
``def`` workflows run on a worker thread and get a :class:`SyncContext` with the
same methods that block instead; both drive one engine execution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from perdure.engine import waits
from perdure.engine.executor import Execution, call_sync
from perdure.engine.retry import RetryPolicy
from perdure.errors import ConfigurationError

T = TypeVar("T")


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

    def _sleep(self, delay: float | timedelta) -> Coroutine[Any, Any, None]:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise ConfigurationError("sleep takes a non-negative number of seconds or a timedelta")
        return waits.sleep(self._execution, seconds=float(seconds))

    def _sleep_until(self, when: datetime) -> Coroutine[Any, Any, None]:
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise ConfigurationError("sleep_until takes a timezone-aware datetime")
        return waits.sleep(self._execution, until=when)

    def _wait(self, name: str, timeout: float | timedelta | None) -> Coroutine[Any, Any, Any]:
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if seconds is not None and (not isinstance(seconds, int | float) or seconds < 0):
            raise ConfigurationError("timeout must be a non-negative number of seconds")
        return waits.wait_for_signal(self._execution, name, seconds)


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

    async def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """Wait durably for the next signal ``name``; return its payload.

        Signals sent before the run gets here are kept and delivered in order,
        one per wait. After ``timeout`` (seconds or timedelta; None waits
        forever) raises :class:`~perdure.SignalTimeout`.
        """
        return await self._wait(name, timeout)

    async def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for ``app.get_event(run_id, key)`` to read."""
        await waits.publish(self._execution, "event", key, value)

    async def write_stream(self, key: str, value: Any) -> None:
        """Append ``value`` to the run's stream ``key`` (exactly once per position)."""
        await waits.publish(self._execution, "stream", key, value)

    async def close_stream(self, key: str) -> None:
        """End stream ``key``: readers stop after the values written so far."""
        await waits.publish(self._execution, "stream", key, None, closed=True)

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> T: ...

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as the checkpointed step ``name``.

        The first time the run reaches this step, ``fn`` runs (a plain
        function on a worker thread) and its JSON output is recorded; on every
        replay the recorded output is returned and ``fn`` is not called. An
        ordinary exception is retried per ``retry`` (default: 3 attempts with
        backoff); ``PermanentError`` or exhausted attempts raise
        :class:`~perdure.StepFailed` into the workflow. ``timeout`` (seconds)
        fails an attempt that runs longer with :class:`~perdure.StepTimeout`,
        retried like any error (a plain ``def`` step's thread cannot be
        stopped: it runs on, and its result is ignored).
        """
        return await self._execution.step(name, fn, args, kwargs, retry, timeout)

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
        return await self._execution.transaction(name, fn, args, kwargs, retry)


class SyncContext(_Base):
    """The durable API of a plain ``def`` workflow: :class:`Context`, blocking."""

    def _block(self, coro: Coroutine[Any, Any, T]) -> T:
        result: T = call_sync(self._execution.loop, coro)
        return result

    def sleep(self, delay: float | timedelta) -> None:
        """Wait durably for ``delay``; see :meth:`Context.sleep`."""
        self._block(self._sleep(delay))

    def sleep_until(self, when: datetime) -> None:
        """Wait durably until ``when``; see :meth:`Context.sleep_until`."""
        self._block(self._sleep_until(when))

    def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """Wait durably for signal ``name``; see :meth:`Context.wait_for_signal`."""
        return self._block(self._wait(name, timeout))

    def set_event(self, key: str, value: Any) -> None:
        """Publish an event; see :meth:`Context.set_event`."""
        self._block(waits.publish(self._execution, "event", key, value))

    def write_stream(self, key: str, value: Any) -> None:
        """Append to a stream; see :meth:`Context.write_stream`."""
        self._block(waits.publish(self._execution, "stream", key, value))

    def close_stream(self, key: str) -> None:
        """End a stream; see :meth:`Context.close_stream`."""
        self._block(waits.publish(self._execution, "stream", key, None, closed=True))

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> T:
        """Run ``fn`` as the checkpointed step ``name``; see :meth:`Context.step`."""
        result: T = call_sync(
            self._execution.loop, self._execution.step(name, fn, args, kwargs, retry, timeout)
        )
        return result

    def transaction(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(conn, ...)`` exactly once; see :meth:`Context.transaction`."""
        result: T = call_sync(
            self._execution.loop, self._execution.transaction(name, fn, args, kwargs, retry)
        )
        return result
