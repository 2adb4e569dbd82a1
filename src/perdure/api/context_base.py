"""What ``Context`` and ``SyncContext`` share: the run's facts, and the engine calls
behind their durable methods."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from perdure.api import racing
from perdure.api.event_match import event_match
from perdure.engine import arguments, children, event_waits, parallel, races, typed, waits
from perdure.engine.arguments import validate_name
from perdure.engine.executor import Execution, Rollback
from perdure.engine.retry import RetryPolicy, check_policy
from perdure.errors import ConfigurationError, UnknownWorkflow
from perdure.ids import new_run_id
from perdure.steps import StepCall
from perdure.types import EmittedEvent, Winner

T = TypeVar("T")
P = ParamSpec("P")


class ContextBase:
    """What both contexts share: the run's facts and the calls behind their methods."""

    def __init__(self, execution: Execution) -> None:
        """The context of ``execution``."""
        self._execution = execution

    @property
    def run_id(self) -> str:
        """The id of the run being executed."""
        return self._execution.task.run_id

    @property
    def state(self) -> dict[str, Any]:
        """A dict the body and its update handlers share; not stored, a replay rebuilds it."""
        return self._execution.state

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

        The same on every replay and retry: a report uses it, not the clock.
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
        check_step(name, fn, retry)
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

    def signal(self, name: str) -> racing.RaceMember:
        """A member of a race (``wait_first``, ``wait_all``): the next signal ``name``.

        Its value is the signal's payload. A signal the race does not take
        (another member won) stays for a later wait.
        """
        return racing.signal(name)

    def event(
        self,
        name: str,
        match: dict[str, Any] | None = None,
        *,
        lookback: float | timedelta = 0.0,
    ) -> racing.RaceMember:
        """A member of a race: the next emitted event ``name`` whose payload contains
        ``match``, as [`wait_for_event`][perdure.Context.wait_for_event] takes it; its
        value is the [`EmittedEvent`][perdure.EmittedEvent]."""
        return racing.event(self._execution, name, match, lookback=lookback)

    def timer(
        self,
        delay: float | timedelta | None = None,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> racing.RaceMember:
        """A member of a race: a timer that fires ``delay`` (seconds or a timedelta,
        or the sum of ``days``, ``hours``, ``minutes`` and ``seconds``) after the race
        began; its value is None. It wins only when no other member is there."""
        return racing.timer(delay, days=days, hours=hours, minutes=minutes, seconds=seconds)

    def update(self, name: str) -> racing.RaceMember:
        """A member of a race: an update ``name`` applied to the run while the race
        waits (the workflow declares its handler); its value is the update's payload."""
        return racing.update(self._execution, name)

    def _wait_first(self, members: dict[str, Any]) -> Coroutine[Any, Any, Winner]:
        return races.wait_first(self._execution, racing.members("wait_first", members))

    def _wait_all(self, members: dict[str, Any]) -> Coroutine[Any, Any, dict[str, Any]]:
        return races.wait_all(self._execution, racing.members("wait_all", members))

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
        check_step(name, fn, retry)
        return self._execution.transaction(name, fn, args, kwargs, retry)


def check_step(name: object, fn: object, retry: object) -> None:
    """Refuse a bad step name, a step that is not callable or a retry that is no policy."""
    arguments.label("a step name", name)
    if not callable(fn):
        raise ConfigurationError(f"step {name!r}: {fn!r} is not callable")
    check_policy(f"step {name!r}: retry", retry)
