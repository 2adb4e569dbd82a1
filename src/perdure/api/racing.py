"""The members of a race of waits (``ctx.wait_first``, ``ctx.wait_all``), checked whole.

``ctx.signal``, ``ctx.event``, ``ctx.timer`` and ``ctx.update`` describe what a
race waits for (a ``ChildRun`` handle stands for its child's end); nothing is
written until the race is awaited, and a bad member, name or duration is a
``ConfigurationError`` (or ``WorkflowDefinitionError`` for a bad signal or
event name) raised before anything is recorded.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from perdure.api.child_run import ChildRun
from perdure.api.event_match import event_match
from perdure.engine import arguments
from perdure.engine.arguments import validate_name
from perdure.engine.executor import Execution
from perdure.engine.races import Member
from perdure.errors import ConfigurationError

#: A member's name: a Python identifier (it is a keyword argument), at most 64 characters.
_MEMBER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class RaceMember:
    """One thing a race waits for, not yet named: built by ``ctx.signal``, ``ctx.event``,
    ``ctx.timer`` or ``ctx.update``; the race's keyword gives it its name."""

    __slots__ = ("kind", "lookback", "match", "seconds", "target")

    def __init__(
        self,
        kind: str,
        target: str = "",
        *,
        match: dict[str, Any] | None = None,
        lookback: float = 0.0,
        seconds: float = 0.0,
    ) -> None:
        """A member of ``kind`` waiting for ``target`` (see the ``ctx`` constructors)."""
        self.kind = kind
        self.target = target
        self.match = match or {}
        self.lookback = lookback
        self.seconds = seconds

    def __repr__(self) -> str:
        """The member as written, e.g. ``signal('approve')``."""
        if self.kind == "timer":
            return f"timer({self.seconds:g} s)"
        if self.kind == "event" and self.match:
            return f"event({self.target!r}, match={self.match!r})"
        return f"{self.kind}({self.target!r})"


def signal(name: str) -> RaceMember:
    """A race member: the next signal ``name`` (its payload is the value)."""
    return RaceMember("signal", validate_name("signal", name))


def event(
    execution: Execution,
    name: str,
    match: dict[str, Any] | None = None,
    *,
    lookback: float | timedelta = 0.0,
) -> RaceMember:
    """A race member: the next event ``name`` whose payload contains ``match``."""
    validate_name("event", name)
    wanted = event_match(name, match, execution.env.max_payload_bytes)
    back = arguments.seconds("event lookback", lookback)
    return RaceMember("event", name, match=wanted, lookback=back)


def timer(
    delay: float | timedelta | None,
    *,
    days: float = 0,
    hours: float = 0,
    minutes: float = 0,
    seconds: float = 0,
) -> RaceMember:
    """A race member: a timer firing ``delay`` (or days/hours/minutes/seconds) after
    the race began."""
    parts = {"days": days, "hours": hours, "minutes": minutes, "seconds": seconds}
    for unit, amount in parts.items():
        arguments.seconds(f"timer {unit}", amount)
    total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    if delay is not None:
        if any(parts.values()):
            raise ConfigurationError(
                "a timer takes a delay or days/hours/minutes/seconds, not both"
            )
        total = arguments.seconds("timer delay", delay)
    elif not any(parts.values()):
        raise ConfigurationError("a timer needs a delay (e.g. ctx.timer(hours=24))")
    return RaceMember("timer", seconds=arguments.seconds("timer delay", total))


def update(execution: Execution, name: str) -> RaceMember:
    """A race member: an update ``name`` applied to the run while the race waits."""
    validate_name("update", name)
    handlers = getattr(execution.update_handlers, "handlers", None) or {}
    if name not in handlers:
        raise ConfigurationError(
            f"the race waits for update {name!r}, but the workflow has no handler of that name "
            "(declare one with @app.update_handler)"
        )
    return RaceMember("update", name)


def members(what: str, given: dict[str, Any]) -> list[Member]:
    """The race's members from its keyword arguments, in order, each checked."""
    if not given:
        raise ConfigurationError(
            f"{what} needs at least one member, e.g. "
            f'{what}(approve=ctx.signal("approve"), late=ctx.timer(hours=24))'
        )
    found = []
    for name, value in given.items():
        if not isinstance(name, str) or not _MEMBER.fullmatch(name):
            raise ConfigurationError(
                f"{what}: invalid member name {name!r}: use a Python identifier "
                "of at most 64 characters"
            )
        if isinstance(value, ChildRun):
            found.append(Member(name, "child", value.run_id, workflow=value.workflow))
        elif isinstance(value, RaceMember):
            found.append(
                Member(
                    name,
                    value.kind,
                    value.target,
                    match=value.match,
                    lookback=value.lookback,
                    seconds=value.seconds,
                )
            )
        else:
            raise ConfigurationError(
                f"{what}: member {name!r} is {type(value).__name__}, not a wait: use "
                "ctx.signal(...), ctx.event(...), ctx.timer(...), ctx.update(...) or a "
                "child run from ctx.start_child(...)"
            )
    return found
