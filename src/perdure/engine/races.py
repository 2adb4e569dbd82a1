"""Races and joins of waits: ``ctx.wait_first`` and ``ctx.wait_all``.

A race waits for the first of several *members* (a signal by name, an
emitted event by name and match, a timer, a child run's end, an update
applied at the race) and is one checkpoint of kind 'race' at its position,
completed with the winner: ``{"winner": <member>, "value": <its value>}``. A
replay returns the recorded winner and touches nothing else.

Deciding happens in one transaction, under the event names' locks (sorted)
and then the run's row lock, the locks ``ctx.wait_for_event`` and
``ctx.wait_for_signal`` take: the race looks at its members in the order
written, consumes the first one that is there (only that one: a losing
signal stays pending, a losing event stays free, a losing child runs on)
and writes the checkpoint; a timer wins only when nothing else is there. If
none is there it parks: the event members filed in ``race_event_waits`` for
emitters (an emitter completes the checkpoint itself, migration 0025), the
signal names and children listed in the run's ``waiting_for`` for
``send_signal`` and ``run_finished`` to wake it, due at its earliest timer.

``wait_all`` is a sequence of races over the members not fired yet, each
round a checkpoint of its own; its timers and event windows count from the
first round's start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from perdure.engine import poison, serialization, updates, waits
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import Suspend
from perdure.engine.executor import Execution
from perdure.errors import ChildFailed
from perdure.store.store import execute_async
from perdure.types import EmittedEvent, RunStatus, StepStatus, Winner

#: The kinds of member a race takes.
KINDS = ("signal", "event", "timer", "child", "update")


@dataclass(frozen=True)
class Member:
    """One thing a race waits for, under the ``name`` it is reported by."""

    name: str
    kind: str
    #: The signal's, event's or update's name; the child's run id.
    target: str = ""
    match: dict[str, Any] = field(default_factory=dict)
    lookback: float = 0.0
    #: A timer's duration.
    seconds: float = 0.0
    #: A child run's workflow.
    workflow: str = ""

    def describe(self) -> dict[str, Any]:
        """What the member waits for, as the run's ``waiting_for`` lists it."""
        if self.kind == "event":
            return {"name": self.name, "event": self.target, "match": self.match}
        if self.kind == "timer":
            return {"name": self.name, "timer": self.seconds}
        if self.kind == "child":
            return {"name": self.name, "child": self.target, "workflow": self.workflow}
        return {"name": self.name, self.kind: self.target}


async def wait_first(ex: Execution, members: list[Member]) -> Winner:
    """The first of ``members`` to fire: its name and value, the same on every replay."""
    winner, _ = await _race(ex, members, None, every=False)
    return winner


async def wait_all(ex: Execution, members: list[Member]) -> dict[str, Any]:
    """Every member's value, by name, once all have fired (one race per member)."""
    remaining, values, origin = list(members), {}, None
    while remaining:
        winner, started = await _race(ex, remaining, origin, every=True)
        origin = origin or started
        values[winner.name] = winner.value
        remaining = [m for m in remaining if m.name != winner.name]
    return {m.name: values[m.name] for m in members}


async def _race(
    ex: Execution, members: list[Member], origin: datetime | None, *, every: bool
) -> tuple[Winner, datetime]:
    """Run one race at the next position (a round of ``wait_all`` when ``every``):
    its winner and when the race began."""
    await ex.gate()
    step_name = "race:" + "|".join(m.name for m in members)
    position, recorded = ex.advance(step_name, "race")
    if recorded is not None and recorded.status in (StepStatus.COMPLETED, StepStatus.FAILED):
        await updates.serve(ex, position, current=False)
        return _recorded(ex, members, recorded.status, recorded.output, recorded.error), (
            recorded.started_at
        )
    started = recorded.started_at if recorded is not None else None
    while True:
        await updates.serve(ex, position, current=True)
        ex.end_of_history()
        if started is None:
            started = origin or ex.env.store.statements.clock.wall_now()
        decided = await _decide(ex, members, position, step_name, recorded, origin, started, every)
        if decided is not None:
            return decided, started


def _recorded(
    ex: Execution,
    members: list[Member],
    status: StepStatus | str,
    output: Any,
    error: dict[str, Any] | None,
) -> Winner:
    """The winner a race's checkpoint records (a failed child's ChildFailed raised)."""
    if status == StepStatus.FAILED or status == "failed":
        error = dict(error or {})
        raise ChildFailed(
            str(error.get("member", "race")),
            str(error.get("child_run_id", "")),
            str(error.get("status", "failed")),
            error,
        )
    record = poison.refuse(ex, "the winner of a race", output)
    name = record.get("winner") if isinstance(record, dict) else None
    member = next((m for m in members if m.name == name), None)
    if member is None:
        raise ValueError(f"run {ex.task.run_id}: a race recorded an unknown winner {name!r}")
    value = poison.refuse(ex, f"the value of {member.name!r}", record.get("value"))
    if member.kind == "event":
        value = EmittedEvent.from_record(value)
    return Winner(member.name, value)


def _applied_update(ex: Execution, member: Member, position: int) -> tuple[bool, Any]:
    """Whether an update ``member`` names was applied at the race: (found, its payload)."""
    for row in (ex.applied_updates or {}).get(position, []):
        if row["name"] == member.target:
            return True, row["payload"]
    return False, None


def _deadline(member: Member, started: datetime | None) -> datetime | None:
    """When a timer member fires, if the race's start is known."""
    return None if started is None else started + timedelta(seconds=member.seconds)


async def _decide(
    ex: Execution,
    members: list[Member],
    position: int,
    step_name: str,
    recorded: Any,
    origin: datetime | None,
    started: datetime,
    every: bool,
) -> Winner | None:
    """Take the race's winner (checkpointed), or None when updates wait to be served;
    else park (Suspend)."""
    statements, fence = ex.env.store.statements, ex.task.fence
    # The start the members count from: the first round's, or this race's once parked.
    since = origin or (recorded.started_at if recorded is not None else None)
    attempt = Attempt(position, step_name, "race", 1, started)
    events = sorted({m.target for m in members if m.kind == "event"})
    failure: dict[str, Any] | None = None
    async with ex.env.store.transaction() as conn:
        for name in events:
            await execute_async(conn, statements.emissions.lock(name))
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        state = await execute_async(conn, statements.races.state(fence, position=position))
        if not state.leased:
            ex.lose_lease()
        if state.written:
            # An emitter completed the race while the task was being claimed.
            await execute_async(conn, statements.races.unpark(ex.task.run_id, position))
            return _recorded(ex, members, "completed", state.payload, None)
        winner: Winner | None = None
        for member in members:
            found, value = await _take(ex, conn, member, position, step_name, since)
            if found == "failed":
                failure = dict(value, member=member.name)
                break
            if found:
                winner = Winner(member.name, value)
                break
        if winner is None and failure is None:
            if await updates.pending(ex, conn):
                return None
            winner = _timer(members, since, state.db_now)
        if failure is not None:
            text = serialization.error_json(failure)
            await ex.checkpoint(attempt, "failed", None, text, conn=conn)
        elif winner is not None:
            value = winner.value
            text = json.dumps({"winner": winner.name, "value": value})
            await ex.checkpoint(attempt, "completed", text, None, conn=conn)
        else:
            await _park(ex, conn, members, position, step_name, recorded, since, every)
        if winner is not None or failure is not None:
            if events:
                await execute_async(conn, statements.races.unpark(ex.task.run_id, position))
    if failure is not None:
        _recorded(ex, members, "failed", None, failure)
    if winner is None:
        raise Suspend()
    return _recorded(ex, members, "completed", {"winner": winner.name, "value": winner.value}, None)


async def _take(
    ex: Execution,
    conn: Any,
    member: Member,
    position: int,
    step_name: str,
    since: datetime | None,
) -> tuple[Any, Any]:
    """Consume ``member`` for the race if it is there: (True, its value), (False, None),
    or ("failed", its error record) for a child that ended without completing."""
    statements, fence = ex.env.store.statements, ex.task.fence
    if member.kind == "update":
        return _applied_update(ex, member, position)
    if member.kind == "signal":
        taken = await execute_async(
            conn,
            statements.races.signal(
                fence, position=position, name=member.target, step_name=step_name
            ),
        )
    elif member.kind == "event":
        start = None if since is None else since - timedelta(seconds=member.lookback)
        taken = await execute_async(
            conn,
            statements.races.event(
                fence,
                position=position,
                step_name=step_name,
                name=member.target,
                match=member.match,
                since=start,
                lookback=member.lookback,
            ),
        )
    elif member.kind == "child":
        return await _child(ex, conn, member)
    else:
        return False, None
    if not taken.leased:
        ex.lose_lease()
    if not taken.written:
        return False, None
    if member.kind == "signal":
        ex.env.observer.signal_consumed(ex.task, member.target)
    return True, poison.refuse(ex, f"the value of {member.name!r}", taken.payload)


async def _child(ex: Execution, conn: Any, member: Member) -> tuple[Any, Any]:
    """A child member: its output once it completed, its error record once it ended
    otherwise."""
    row = await execute_async(conn, ex.env.store.statements.runs.child_status(member.target))
    if row is None:
        error: dict[str, Any] = {"message": "the child run is gone", "status": "missing"}
    else:
        status = RunStatus(row["status"])
        if status == RunStatus.COMPLETED:
            output = row["output"]
            return True, poison.refuse(ex, f"the output of child run {member.target}", output)
        if not status.is_final:
            return False, None
        error = dict(row["error"] or {})
        error["status"] = status.value
    error["child_run_id"] = member.target
    return "failed", error


def _timer(members: list[Member], since: datetime | None, now: datetime | None) -> Winner | None:
    """The timer that fired (the earliest due), when the race's start is known."""
    due = [
        (deadline, m)
        for m in members
        if m.kind == "timer" and (deadline := _deadline(m, since)) is not None
        if now is not None and now >= deadline
    ]
    if not due:
        return None
    return Winner(min(due, key=lambda d: d[0])[1].name, None)


async def _park(
    ex: Execution,
    conn: Any,
    members: list[Member],
    position: int,
    step_name: str,
    recorded: Any,
    since: datetime | None,
    every: bool,
) -> None:
    """File the event members, list what wakes the race, and hand the task back."""
    statements, fence = ex.env.store.statements, ex.task.fence
    filed = [(m.name, m.target, m.match, m.lookback) for m in members if m.kind == "event"]
    if filed:
        await execute_async(
            conn, statements.races.park(fence, position=position, since=since, members=filed)
        )
    waiting_for: dict[str, Any] = {"race": [m.describe() for m in members]}
    if every:
        waiting_for["all"] = True
    signals = sorted({m.target for m in members if m.kind == "signal"})
    if signals:
        waiting_for["signals"] = signals
    children = [m.target for m in members if m.kind == "child"]
    if children:
        waiting_for["child"] = children
    timers = [m.seconds for m in members if m.kind == "timer"]
    wake_at = recorded.wake_at if recorded is not None else None
    if wake_at is None and since is not None and timers:
        wake_at = since + timedelta(seconds=min(timers))
    seconds = min(timers) if timers else waits.FOREVER_SECONDS
    await waits.park(
        ex,
        position,
        step_name,
        "race",
        waiting_for,
        wake_at=wake_at,
        seconds=seconds,
        conn=conn,
    )
