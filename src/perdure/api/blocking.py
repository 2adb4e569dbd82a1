"""How a blocking method is derived from its async form: it runs the async form on the
execution's loop while the workflow's thread waits."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from perdure.api.presenting import presents
from perdure.engine.executor import Execution, call_sync

T = TypeVar("T")
P = ParamSpec("P")


class _Executing(Protocol):
    """What a blocking form needs of its object: the execution whose loop runs the async form."""

    _execution: Execution


A = TypeVar("A")
B = TypeVar("B", bound=_Executing)
R = TypeVar("R")


def derive(
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


def same(value: T) -> T:
    """``value`` itself: the ``then`` of a blocking form that returns what its async form does."""
    return value
