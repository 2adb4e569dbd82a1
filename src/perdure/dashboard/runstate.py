"""What a run page says of where a run stands: its status, steps line and wait line,
made to agree with each other.

A run is recorded ``waiting`` until a worker claims it again, even once the
signal it waited for has arrived (the signal completes the wait step and makes
the run due). Shown raw, that reads "waiting for signal packed · due in 1 d"
next to a completed wait step. This module reads the run, its steps and its
signals together and says one thing: the signal arrived, the run is due, a
worker continues it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from perdure.dashboard import format as fmt
from perdure.types import Run, Step, StepStatus


@dataclass(frozen=True)
class RunState:
    """The run page's statements of where the run stands."""

    #: The status the header's badge shows.
    status: str
    #: "5 / 5 completed" for a finished run; "4 completed · waiting for signal packed" else.
    steps: str
    #: What the run waits for ("signal packed · times out in 1 d"), or None if nothing.
    waiting: str | None
    #: True when the run is due: the next thing to happen is a worker claiming it.
    due: bool


def describe(run: Run, steps: list[Step], signals: list[dict[str, Any]], now: datetime) -> RunState:
    """Where ``run`` stands, from its record, its ``steps`` and the ``signals`` it received."""
    completed = sum(1 for s in steps if s.status == StepStatus.COMPLETED)
    status = run.status.value
    if run.status.is_final:
        return RunState(status, f"{completed} / {len(steps)} completed", None, False)
    waiting_for = run.waiting_for or {}
    signal = waiting_for.get("signal")
    arrived = status == "waiting" and signal is not None and _arrived(signal, steps, signals)
    if status == "waiting" and isinstance(waiting_for.get("race"), list):
        arrived = _race_won(waiting_for, steps, signals)
    if arrived:
        status = "queued"
    waiting = None
    if status == "waiting":
        waiting = _wait_line(waiting_for, now)
    if status == "queued":
        nxt = "next: a worker claims the run"
    elif status == "waiting":
        nxt = "waiting for " + (waiting or "a wake-up").split(" · ")[0]
    else:
        nxt = status
    return RunState(status, f"{completed} completed · {nxt}", waiting, status == "queued")


def _arrived(signal: str, steps: list[Step], signals: list[dict[str, Any]]) -> bool:
    """Whether the signal the run waits for arrived: its newest wait step completed
    (the signal was delivered to it) or a signal of that name waits unconsumed."""
    waits = [s for s in steps if s.kind == "signal" and s.name.startswith(f"signal:{signal}")]
    if waits and max(waits, key=lambda s: s.position).status == StepStatus.COMPLETED:
        return True
    return any(s.get("name") == signal and s.get("consumed_at") is None for s in signals)


def _race_won(
    waiting_for: dict[str, Any], steps: list[Step], signals: list[dict[str, Any]]
) -> bool:
    """Whether a racing run is due: its race completed (an event won it) or a signal
    one of its members waits for is there, unconsumed."""
    races = [s for s in steps if s.kind == "race"]
    if races and max(races, key=lambda s: s.position).status == StepStatus.COMPLETED:
        return True
    names = set(waiting_for.get("signals") or ())
    return any(s.get("name") in names and s.get("consumed_at") is None for s in signals)


def _wait_line(waiting_for: dict[str, Any], now: datetime) -> str | None:
    """``signal packed · times out in 1 d``, ``event order.paid matching {...} · times
    out in 1 d``, ``a timer · wakes in 5 min``, or None."""
    until = waiting_for.get("until")
    if isinstance(waiting_for.get("race"), list):
        return _race_line(waiting_for, now)
    if "signal" in waiting_for or "event" in waiting_for:
        if "signal" in waiting_for:
            line = f"signal {waiting_for['signal']}"
        else:
            match = waiting_for.get("match")
            line = f"event {waiting_for['event']}"
            line += f" matching {fmt.compact(match, 80)}" if match else ""
        deadline = fmt.due(until, now).removeprefix("due ")
        return f"{line} · times out {deadline}" if deadline else line
    if "sleep" in waiting_for:
        deadline = fmt.due(until, now).removeprefix("due ")
        return f"a timer · wakes {deadline}" if deadline else "a timer"
    if not waiting_for:
        return None
    return fmt.compact(waiting_for)


def _race_line(waiting_for: dict[str, Any], now: datetime) -> str:
    """``first of approve: signal approve, reject: event order.rejected matching {...},
    escalate: a timer · fires in 1 d`` (``all of`` for ``ctx.wait_all``)."""
    parts = []
    for member in waiting_for["race"]:
        if not isinstance(member, dict):
            continue
        if "event" in member:
            what = f"event {member['event']}"
            what += f" matching {fmt.compact(member['match'], 80)}" if member.get("match") else ""
        elif "timer" in member:
            what = "a timer"
        elif "child" in member:
            what = f"child run {str(member['child'])[:8]} ({member.get('workflow', '')})"
        else:
            kind = next((k for k in ("signal", "update") if k in member), "")
            what = f"{kind} {member.get(kind, '')}".strip()
        parts.append(f"{member.get('name')}: {what}")
    line = ("all of " if waiting_for.get("all") else "first of ") + ", ".join(parts)
    deadline = fmt.due(waiting_for.get("until"), now).removeprefix("due ")
    return f"{line} · the timer fires {deadline}" if deadline else line
