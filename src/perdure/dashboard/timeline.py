"""A run's timeline: one lane per step, with attempts, retry backoffs and waits as segments.

The geometry is computed here, in percent of the run's span, and drawn by the
run page as server-side SVG (no JavaScript, no inline styles). The steps table
gives each step's last attempt (started_at to completed_at); the history gives
the earlier ones: each ``step_retry_scheduled`` event ends a failed attempt,
and the next claim of the run (or of the step's task) starts the next one.

Attempts no step row records are drawn too: those a crash or a lost lease
ended (``lease_expired``, the stored name of a lapse) and those a worker
handed back (``run_released``).
Each is drawn on the step that was in flight, from the worker's last recorded
moment to the event, titled with how it ended.

Updates (requests into the run, ``app.updates``) get a lane each, after the
run's: a mark where the worker accepted it and one where it replied, joined
by a line, in the colour of its status; a refused request is one hollow mark
where it was refused. Each mark's title names the update and its id, and
quotes its payload and reply only for a role that sees payloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from perdure.dashboard import format as fmt
from perdure.types import HistoryEvent, Run, Step

#: The most lanes drawn; a map over thousands of items is summarised.
MAX_LANES = 200
#: The most update lanes drawn; the Updates table below the timeline lists them all.
MAX_UPDATE_LANES = 20
#: Narrower segments are widened to this (percent), so a 1 ms step stays visible.
MIN_WIDTH = 0.4
_CLAIMS = ("run_claimed", "step_claimed")
_WAITS = ("sleep", "signal", "child_result")
#: History events that end an attempt no step row records.
_LOST = ("lease_expired", "run_released")


@dataclass(frozen=True)
class Segment:
    """A stretch of one lane: ``kind`` is attempt, failed, backoff, wait or queued."""

    start: float
    width: float
    kind: str
    tone: str
    title: str


@dataclass(frozen=True)
class Lost:
    """An attempt a crash, a lost lease or a hand-back ended: on which step, when, how."""

    position: int | None
    start: datetime
    end: datetime
    attempt: int | None
    worker: str | None
    ended: str


@dataclass(frozen=True)
class Mark:
    """A moment on a lane (percent): an update ``accepted``, ``replied``, ``requested``
    (not decided yet) or ``rejected``."""

    at: float
    kind: str
    tone: str
    title: str


@dataclass(frozen=True)
class Lane:
    """One row of the timeline: the run itself, one step, or one update (``kind``)."""

    label: str
    detail: str
    duration: str
    segments: list[Segment]
    tone: str
    kind: str = "step"
    marks: list[Mark] = field(default_factory=list)
    #: The update's id, on an update's lane.
    ref: str = ""


@dataclass(frozen=True)
class Timeline:
    """The lanes, the axis ticks (percent, label) and how many lanes were left out
    (steps in ``hidden``, updates in ``hidden_updates``)."""

    lanes: list[Lane]
    ticks: list[tuple[float, str]]
    hidden: int
    hidden_updates: int = 0


class _Scale:
    """Maps times onto 0-100 % of the run's span."""

    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.total = max((end - start).total_seconds(), 0.001)

    def segment(self, a: datetime, b: datetime, kind: str, tone: str, title: str) -> Segment:
        left = min(max((a - self.start).total_seconds() / self.total * 100, 0.0), 100.0)
        right = min(max((b - self.start).total_seconds() / self.total * 100, left), 100.0)
        width = max(right - left, MIN_WIDTH)
        return Segment(round(min(left, 100 - width), 3), round(width, 3), kind, tone, title)

    def point(self, at: datetime) -> float:
        """Where ``at`` falls, in percent, kept within the drawing."""
        return round(min(max((at - self.start).total_seconds() / self.total * 100, 0.0), 100.0), 3)


def build(
    run: Run,
    steps: list[Step],
    history: list[HistoryEvent],
    now: datetime,
    lost_workers: frozenset[str] = frozenset(),
    updates: list[dict[str, Any]] | None = None,
    payloads: bool = True,
) -> Timeline:
    """The timeline of ``run`` as of ``now``; ``lost_workers`` are the ids of workers
    recorded as lost (their attempts read "worker lost"). ``updates`` are the run's
    requests (``app.updates``), each drawn on a lane of its own; their titles quote
    payloads and replies only when ``payloads``."""
    live = not run.status.is_final
    sent = [_times(u) for u in (updates or [])]
    ends = [s.completed_at for s in steps if s.completed_at] + [h.at for h in history]
    ends += [t for u in sent for t in (u["created_at"], u["completed_at"]) if t is not None]
    end = max([now if live else (run.completed_at or run.updated_at), *ends])
    scale = _Scale(run.created_at, end)
    claims = sorted(h.at for h in history if h.event in _CLAIMS)
    times = sorted(h.at for h in history)
    lost = lost_attempts(run, steps, history, lost_workers)
    lanes = [_run_lane(run, scale, now, [a for a in lost if a.position is None])]
    lanes += [_update_lane(u, scale, now, payloads) for u in sent[:MAX_UPDATE_LANES]]
    for step in steps[:MAX_LANES]:
        mine = [h for h in history if h.step_position == step.position]
        lane = _step_lane(step, mine, claims, times, scale, now)
        ended = [a for a in lost if a.position == step.position]
        if ended:
            lane = _with_lost(lane, ended, scale)
        lanes.append(lane)
    ticks = [(p, "+" + fmt.span(scale.total * p / 100)) for p in (0.0, 25.0, 50.0, 75.0, 100.0)]
    return Timeline(
        lanes, ticks, max(len(steps) - MAX_LANES, 0), max(len(sent) - MAX_UPDATE_LANES, 0)
    )


def _times(update: dict[str, Any]) -> dict[str, Any]:
    """``update`` with its times as datetimes (a JSON reader gives ISO text)."""
    found = dict(update)
    for key in ("created_at", "accepted_at", "completed_at"):
        value = found.get(key)
        if isinstance(value, str):
            found[key] = datetime.fromisoformat(value)
    return found


def _update_lane(update: dict[str, Any], scale: _Scale, now: datetime, payloads: bool) -> Lane:
    """One update's lane: accepted and replied marks joined by a line, or a refusal."""
    status = str(update.get("status", ""))
    tone = fmt.tone(status)
    created: datetime = update["created_at"]
    accepted: datetime | None = update.get("accepted_at")
    replied: datetime | None = update.get("completed_at")
    head = f"update {update.get('name', '')} · id {update.get('update_id', '')} · {status}"
    said = _said(update, payloads)
    at = scale.point
    segments: list[Segment] = []
    marks: list[Mark] = []
    if accepted is None:
        # Not decided yet (requested), or refused by its validator (rejected).
        moment = replied or created
        when = "refused" if status == "rejected" else "requested"
        title = f"{head} · {when} +{fmt.span((moment - scale.start).total_seconds())}{said}"
        marks.append(Mark(at(moment), status if status == "rejected" else "requested", tone, title))
        if replied is None:
            segments.append(scale.segment(created, now, "update", tone, title))
        started = created
    else:
        end = replied or now
        took = fmt.span((end - accepted).total_seconds())
        where = (
            f" at step {update['anchor_position']}, #{int(update.get('seq') or 0) + 1}"
            if update.get("anchor_position") is not None
            else ""
        )
        title = (
            f"{head}{where} · accepted +{fmt.span((accepted - scale.start).total_seconds())}"
            + (f", replied after {took}" if replied else f", no reply yet ({took})")
            + said
        )
        segments.append(scale.segment(accepted, end, "update", tone, title))
        marks.append(Mark(at(accepted), "accepted", tone, title))
        if replied is not None:
            marks.append(Mark(at(replied), "replied", tone, title))
        started = accepted
    return Lane(
        str(update.get("name", "")),
        f"update · {status}",
        fmt.between(started, replied),
        segments,
        tone,
        kind="update",
        marks=marks,
        ref=str(update.get("update_id", "")),
    )


def _said(update: dict[str, Any], payloads: bool) -> str:
    """The payload, reply or error of an update, for its title: only the error's
    type for a role that sees no payloads."""
    error = update.get("error")
    kind = error.get("type", "Error") if isinstance(error, dict) else "Error"
    if not payloads:
        return f" · {kind}" if error else ""
    text = f" · payload {fmt.compact(update.get('payload'), 200)}"
    if update.get("status") == "completed":
        text += f" · reply {fmt.compact(update.get('result'), 200)}"
    elif error:
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        text += f" · {kind}: {message}"
    return text[:400]


def lost_attempts(
    run: Run,
    steps: list[Step],
    history: list[HistoryEvent],
    lost_workers: frozenset[str] = frozenset(),
) -> list[Lost]:
    """The attempts of ``run`` that a crash, a lost lease or a hand-back ended.

    A step task's event names its step. A run task's names none: the step in
    flight is the first one that (re)started after the event, i.e. whose
    checkpoint the lost attempt never wrote (None while no worker resumed it).
    """
    found = []
    for event in history:
        if event.event not in _LOST:
            continue
        before = [
            h.at
            for h in history
            if h.at < event.at
            and (h.worker_id == event.worker_id or h.event in _CLAIMS)
            and h.event not in _LOST
        ]
        start = max(before, default=run.started_at or run.created_at)
        position = event.step_position
        if position is None:
            again = [
                s.position
                for s in steps
                if s.kind not in _WAITS and (s.started_at >= event.at or s.completed_at is None)
            ]
            position = min(again, default=None)
        found.append(
            Lost(
                position,
                start,
                event.at,
                event.attempt,
                event.worker_id,
                _ending(event, lost_workers),
            )
        )
    return found


def _ending(event: HistoryEvent, lost_workers: frozenset[str]) -> str:
    """How an attempt ended, in words."""
    detail = event.detail if isinstance(event.detail, dict) else {}
    if event.event == "run_released":
        why = detail.get("reason")
        return f"handed back by its worker{f' ({why})' if why else ''}"
    if event.worker_id is not None and event.worker_id in lost_workers:
        return "worker lost: its lease lapsed"
    return "lease lapsed: its worker stopped renewing it (crashed or stalled)"


def _with_lost(lane: Lane, lost: list[Lost], scale: _Scale) -> Lane:
    """``lane`` with its lost attempts drawn before its other segments."""
    drawn = [
        scale.segment(
            a.start,
            a.end,
            "lost",
            "bad",
            f"attempt {a.attempt if a.attempt is not None else '?'} ended: {a.ended}"
            + (f" · worker {a.worker}" if a.worker else ""),
        )
        for a in lost
    ]
    words = f"{len(lost)} lost" if len(lost) > 1 else "1 lost"
    return Lane(
        lane.label, f"{lane.detail}, {words}", lane.duration, drawn + lane.segments, lane.tone
    )


def _run_lane(run: Run, scale: _Scale, now: datetime, lost: list[Lost]) -> Lane:
    segments = []
    started = run.started_at
    queued_until = started or run.completed_at or now
    segments.append(scale.segment(run.created_at, queued_until, "queued", "live", "queued"))
    if started is not None:
        end = run.completed_at or now
        title = f"{run.status.value} · {fmt.span((end - started).total_seconds())}"
        segments.append(scale.segment(started, end, "attempt", fmt.tone(run.status), title))
    lane = Lane(
        "run",
        run.status.value,
        fmt.between(run.created_at, run.completed_at),
        segments,
        fmt.tone(run.status),
    )
    return _with_lost(lane, lost, scale) if lost else lane


def _step_lane(
    step: Step,
    events: list[HistoryEvent],
    claims: list[datetime],
    times: list[datetime],
    scale: _Scale,
    now: datetime,
) -> Lane:
    segments: list[Segment] = []
    failed_at: datetime | None = None
    for event in (e for e in events if e.event == "step_retry_scheduled"):
        if failed_at is None:
            # The first attempt began at the run's previous recorded moment.
            start = max((t for t in times if t < event.at), default=event.at)
        else:
            start = next((t for t in claims if t >= failed_at), failed_at)
            segments.append(_backoff(scale, failed_at, start))
        message = (event.detail or {}).get("message", "")
        title = f"attempt {event.attempt} failed: {message}"[:300]
        segments.append(scale.segment(start, event.at, "failed", "bad", title))
        failed_at = event.at
    status = step.status.value
    end = step.completed_at or now
    gate = next((e.at for e in events if e.event == "run_waiting"), None)
    parked = False
    if gate is not None and step.kind not in _WAITS:
        # A graph step's approval gate: the wait for its signal, before it ran.
        parked = step.started_at <= gate
        opened = now if parked else step.started_at
        segments.append(scale.segment(gate, opened, "wait", "waiting", "waiting for its signal"))
    if parked:
        pass
    elif step.kind in _WAITS:
        what = "sleep" if step.kind == "sleep" else f"wait for {step.kind.replace('_', ' ')}"
        segments.append(
            scale.segment(step.started_at, end, "wait", "waiting", f"{what} · {status}")
        )
    elif status == "retrying":
        if failed_at is not None:
            segments.append(_backoff(scale, failed_at, now))
    elif status == "pending":
        segments.append(scale.segment(step.started_at, end, "queued", "live", "queued"))
    else:
        if failed_at is not None and step.started_at > failed_at:
            segments.append(_backoff(scale, failed_at, step.started_at))
        title = f"attempt {step.attempts} {status} · {fmt.between(step.started_at, end)}"
        kind = "failed" if status in ("failed", "timed_out") else "attempt"
        segments.append(scale.segment(step.started_at, end, kind, fmt.tone(status), title))
    attempts = f", {step.attempts} attempts" if step.attempts > 1 else ""
    return Lane(
        step.name,
        f"{step.kind}{attempts}",
        fmt.between(step.started_at, step.completed_at),
        segments,
        fmt.tone(status),
    )


def _backoff(scale: _Scale, start: datetime, end: datetime) -> Segment:
    title = f"retry backoff · {fmt.span((end - start).total_seconds())}"
    return scale.segment(start, end, "backoff", "warn", title)
