"""The ``ctx`` a workflow receives: durable steps and database transactions.

Async workflows get a :class:`Context`, whose methods are awaited. Plain
``def`` workflows run on a worker thread and get a :class:`SyncContext` with the
same methods that block instead; both drive one engine execution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from perdure.engine.executor import Execution, call_sync
from perdure.engine.retry import RetryPolicy

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


class Context(_Base):
    """The durable API of an ``async def`` workflow."""

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
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
        **kwargs: Any,
    ) -> T: ...

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as the checkpointed step ``name``.

        The first time the run reaches this step, ``fn`` runs (a plain
        function on a worker thread) and its JSON output is recorded; on every
        replay the recorded output is returned and ``fn`` is not called. An
        ordinary exception is retried per ``retry`` (default: 3 attempts with
        backoff); ``PermanentError`` or exhausted attempts raise
        :class:`~perdure.StepFailed` into the workflow.
        """
        return await self._execution.step(name, fn, args, kwargs, retry)

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

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T:
        """Run ``fn`` as the checkpointed step ``name``; see :meth:`Context.step`."""
        result: T = call_sync(
            self._execution.loop, self._execution.step(name, fn, args, kwargs, retry)
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
