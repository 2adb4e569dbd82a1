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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from perdure.dashboard import format as fmt
from perdure.types import HistoryEvent, Run, Step

#: The most lanes drawn; a map over thousands of items is summarised.
MAX_LANES = 200
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
class Lane:
    """One row of the timeline: the run itself, or one step."""

    label: str
    detail: str
    duration: str
    segments: list[Segment]
    tone: str


@dataclass(frozen=True)
class Timeline:
    """The lanes, the axis ticks (percent, label) and how many lanes were left out."""

    lanes: list[Lane]
    ticks: list[tuple[float, str]]
    hidden: int


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


def build(
    run: Run,
    steps: list[Step],
    history: list[HistoryEvent],
    now: datetime,
    lost_workers: frozenset[str] = frozenset(),
) -> Timeline:
    """The timeline of ``run`` as of ``now``; ``lost_workers`` are the ids of workers
    recorded as lost (their attempts read "worker lost")."""
    live = not run.status.is_final
    ends = [s.completed_at for s in steps if s.completed_at] + [h.at for h in history]
    end = max([now if live else (run.completed_at or run.updated_at), *ends])
    scale = _Scale(run.created_at, end)
    claims = sorted(h.at for h in history if h.event in _CLAIMS)
    times = sorted(h.at for h in history)
    lost = lost_attempts(run, steps, history, lost_workers)
    lanes = [_run_lane(run, scale, now, [a for a in lost if a.position is None])]
    for step in steps[:MAX_LANES]:
        mine = [h for h in history if h.step_position == step.position]
        lane = _step_lane(step, mine, claims, times, scale, now)
        ended = [a for a in lost if a.position == step.position]
        if ended:
            lane = _with_lost(lane, ended, scale)
        lanes.append(lane)
    ticks = [(p, "+" + fmt.span(scale.total * p / 100)) for p in (0.0, 25.0, 50.0, 75.0, 100.0)]
    return Timeline(lanes, ticks, max(len(steps) - MAX_LANES, 0))


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
