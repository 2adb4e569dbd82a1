"""What workflow code holds and raises around its steps: StepCall, StepContext, Snooze.

A leaf: it imports nothing of perdure, so that the engine below the public API
and the API itself can both name these types. They are exported from the
package root (``perdure.StepCall``, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class StepRunner(Protocol):
    """What runs a step: the engine's execution of the run."""

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: Any,
        timeout: float | None = None,
        *,
        reserved: Any = None,
    ) -> Awaitable[Any]:
        """Run (or replay) step ``name`` at the next position, or at ``reserved``."""


@dataclass
class StepCall(Generic[T]):
    """A step described but not yet run: ``await`` it to run it alone, or gather it.

    ``ctx.step(...)`` returns one in async workflows; ``ctx.branch(...)`` in both
    kinds of workflow.
    """

    execution: StepRunner
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The step's RetryPolicy, or None for the default.
    retry: Any = None
    timeout: float | None = None

    def run(self, reserved: Any = None) -> Any:
        """The coroutine that runs this step (at ``reserved`` when a gather took it)."""
        return self.execution.step(
            self.name, self.fn, self.args, self.kwargs, self.retry, self.timeout, reserved=reserved
        )

    def __await__(self) -> Generator[Any, None, T]:
        return self.run().__await__()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class StepContext:
    """What a graph step (or its compensation) receives as ``ctx``."""

    run_id: str
    workflow: str
    step: str
    attempt: int
    #: The payload of the signal that opened this step's gate, if it has one.
    signal: Any = None
    #: The schedule that started the run and the tick it covers, if one did.
    schedule: str | None = None
    scheduled_at: datetime | None = None


class Snooze(Exception):
    """Park the run until later without counting a failed attempt.

    Raise it from a step (or return it) when the outside world says "not now",
    e.g. an API answering 429 with Retry-After: the run gives its worker slot
    back and the step runs again after ``seconds`` (or at ``until``).
    """

    def __init__(
        self, seconds: float | None = None, *, until: datetime | None = None, reason: str = ""
    ) -> None:
        """Snooze for ``seconds``, or until the aware datetime ``until``."""
        if (seconds is None) == (until is None):
            raise ValueError("Snooze takes seconds or until=, exactly one of them")
        if until is not None and until.tzinfo is None:
            raise ValueError("Snooze(until=...) needs a timezone-aware datetime")
        if seconds is not None and seconds < 0:
            raise ValueError("Snooze seconds cannot be negative")
        #: The moment to wake at, when given; the worker measures the delay to
        #: it with the App's clock (a VirtualClock in tests), not the machine's.
        self.until = until
        self.delay = (
            float(seconds)
            if seconds is not None
            else max(0.0, (until - datetime.now(UTC)).total_seconds())  # type: ignore[operator]
        )
        self.reason = reason
        what = f"until {until.isoformat()}" if until is not None else f"for {self.delay:g} s"
        super().__init__(f"snoozed {what}" + (f": {reason}" if reason else ""))

    def seconds_from(self, now: datetime) -> float:
        """The delay from ``now`` (the App's clock): to ``until``, else the seconds given."""
        if self.until is None:
            return self.delay
        return max(0.0, (self.until - now).total_seconds())
