"""The dashboard's drawings and wording, computed without a database or a browser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from perdure.dashboard import chart, dag, timeline
from perdure.dashboard import format as fmt
from perdure.types import HistoryEvent, Run, RunStatus, Step, StepStatus

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def test_durations_and_relative_times_read_naturally() -> None:
    assert fmt.span(0.0123) == "12 ms"
    assert fmt.span(2.46) == "2.5 s"
    assert fmt.span(185) == "3 min 05 s"
    assert fmt.span(7800) == "2 h 10 min"
    assert fmt.span(3 * 86400 + 4 * 3600) == "3 d 04 h"
    assert fmt.ago(at(0), at(200)) == "3 min ago"
    assert fmt.ago(at(400), at(100)) == "in 5 min"
    assert fmt.ago(None) == "-"
    assert fmt.number(12345) == "12,345" and fmt.number(10000, cap=10000) == "10,000+"
    assert fmt.tone(RunStatus.COMPENSATION_FAILED) == "bad" and fmt.tone("anything") == "muted"
    assert fmt.compact({"a": "x" * 200}, 20).endswith("…")
    assert fmt.due(at(600).isoformat(), at(0)) == "due in 10 min"
    assert fmt.due(at(100 * 365 * 86400), at(0)) == "" and fmt.due(None) == ""


def test_chart_stacks_statuses_per_bucket_and_scales_to_a_round_top() -> None:
    rows = [
        {"bucket": at(0), "status": "completed", "n": 30},
        {"bucket": at(0), "status": "failed", "n": 6},
        {"bucket": at(120), "status": "running", "n": 4},
        {"bucket": at(-600), "status": "completed", "n": 99},  # before the window: ignored
    ]
    drawn = chart.build(rows, at(0), timedelta(minutes=1), at(300))
    assert drawn.totals == {"ok": 30, "bad": 6, "muted": 0, "live": 4}
    assert [r.tone for r in drawn.rects] == ["ok", "bad", "live"]
    ok, bad, live = drawn.rects
    assert ok.x == bad.x < live.x
    assert bad.y + bad.height == ok.y  # stacked
    assert drawn.grid[-1][1] == "50"  # 36 rounds up to 50
    assert abs(ok.height - (chart.BASE - chart.TOP) * 30 / 50) < 0.01
    assert "30 completed, 6 failed" in ok.title
    assert chart.window_start(at(95), timedelta(minutes=1), timedelta(seconds=15)) == at(30)


def test_dag_puts_each_step_in_the_column_of_its_depth() -> None:
    definition = {
        "steps": [
            {"name": "extract", "position": 0, "depends_on": []},
            {"name": "clean", "position": 1, "depends_on": ["extract"]},
            {"name": "count", "position": 2, "depends_on": ["extract"]},
            {"name": "load", "position": 3, "depends_on": ["clean", "count"]},
        ]
    }
    steps = [
        Step(0, "extract", "step", StepStatus.COMPLETED, 1, [1], None, "w", at(0), at(1)),
        Step(1, "clean", "step", StepStatus.FAILED, 3, None, {"type": "E"}, "w", at(1), at(2)),
    ]
    drawn = dag.layout(definition, steps)
    assert drawn is not None
    nodes = {n.name: n for n in drawn.nodes}
    assert nodes["extract"].x < nodes["clean"].x == nodes["count"].x < nodes["load"].x
    assert nodes["clean"].y < nodes["count"].y
    assert (nodes["extract"].tone, nodes["clean"].tone, nodes["load"].tone) == ("ok", "bad", "none")
    assert "3 attempts" in nodes["clean"].title and nodes["load"].status == "not started"
    assert len(drawn.edges) == 4
    assert dag.layout({}) is None


def test_timeline_draws_failed_attempts_backoffs_and_waits_apart() -> None:
    run = Run(
        "r1",
        "wf",
        1,
        "wf",
        None,
        RunStatus.COMPLETED,
        None,
        "ok",
        None,
        "w",
        at(0),
        at(1),
        at(20),
        at(20),
    )
    steps = [
        Step(0, "charge", "step", StepStatus.COMPLETED, 2, "ok", None, "w", at(6), at(7)),
        Step(1, "nap", "sleep", StepStatus.COMPLETED, 1, None, None, "w", at(8), at(18)),
    ]

    def event(n: int, seconds: float, name: str, **more: object) -> HistoryEvent:
        return HistoryEvent(
            n,
            at(seconds),
            name,
            more.get("position"),
            None,
            more.get("attempt"),
            "w",
            more.get("detail"),
        )  # type: ignore[arg-type]

    history = [
        event(1, 0, "run_created"),
        event(2, 1, "run_claimed"),
        event(3, 3, "step_retry_scheduled", position=0, attempt=1, detail={"message": "timeout"}),
        event(4, 6, "run_claimed"),
        event(5, 7, "step_completed", position=0, attempt=2),
        event(6, 20, "run_completed"),
    ]
    drawn = timeline.build(run, steps, history, at(30))
    run_lane, charge, nap = drawn.lanes
    assert [s.kind for s in run_lane.segments] == ["queued", "attempt"]
    assert [s.kind for s in charge.segments] == ["failed", "backoff", "attempt"]
    failed, backoff, attempt = charge.segments
    assert (failed.start, failed.width) == (5.0, 10.0)  # 1 s to 3 s of 20 s
    assert (backoff.start, backoff.width) == (15.0, 15.0)  # 3 s to 6 s
    assert attempt.start == 30.0 and "timeout" in failed.title
    assert charge.detail == "step, 2 attempts"
    assert [s.kind for s in nap.segments] == ["wait"] and nap.segments[0].width == 50.0
    assert drawn.ticks[-1] == (100.0, "+20 s")


def test_timeline_draws_a_graph_steps_approval_gate_as_a_wait() -> None:
    run = Run(
        "r2",
        "g",
        1,
        "g",
        None,
        RunStatus.WAITING,
        None,
        None,
        None,
        None,
        at(0),
        at(1),
        None,
        at(5),
    )
    parked = Step(0, "publish", "step", StepStatus.WAITING, 0, None, None, None, at(2), None)
    waiting = [HistoryEvent(1, at(3), "run_waiting", 0, "publish", 1, "w", {"signal": "ok"})]
    (lane,) = timeline.build(run, [parked], waiting, at(10)).lanes[1:]
    assert [(s.kind, s.start, s.width) for s in lane.segments] == [("wait", 30.0, 70.0)]
    ran = Step(0, "publish", "step", StepStatus.COMPLETED, 1, "x", None, "w", at(8), at(9))
    (lane,) = timeline.build(run, [ran], waiting, at(10)).lanes[1:]
    assert [s.kind for s in lane.segments] == ["wait", "attempt"]
    assert lane.segments[0].width == 50.0  # from the park at 3 s to the start at 8 s


def test_timeline_names_how_each_lost_attempt_ended() -> None:
    run = Run(
        "r3", "f", 1, "f", None, RunStatus.COMPLETED, None, 1, None, None,
        at(0), at(0), at(20), at(20),
    )  # fmt: skip
    steps = [
        Step(0, "first", "step", StepStatus.COMPLETED, 1, 1, None, "a", at(1), at(2)),
        Step(1, "slow", "step", StepStatus.COMPLETED, 1, 1, None, "c", at(15), at(19)),
    ]
    history = [
        HistoryEvent(1, at(0), "run_claimed", None, None, 1, "a"),
        HistoryEvent(2, at(2), "step_completed", 0, "first", 1, "a"),
        HistoryEvent(3, at(6), "lease_expired", None, None, 1, "a", {"lapses": 1}),
        HistoryEvent(4, at(7), "run_claimed", None, None, 2, "b"),
        HistoryEvent(5, at(10), "run_released", None, None, 2, "b", {"reason": "shutdown"}),
        HistoryEvent(6, at(14), "run_claimed", None, None, 3, "c"),
    ]
    drawn = timeline.build(run, steps, history, at(30), frozenset({"a"}))
    first, slow = drawn.lanes[1:]
    assert not [s for s in first.segments if s.kind == "lost"]
    lost = [s for s in slow.segments if s.kind == "lost"]
    assert [(s.start, s.width) for s in lost] == [(10.0, 20.0), (35.0, 15.0)]
    assert lost[0].title == "attempt 1 ended: worker lost: its lease lapsed · worker a"
    assert lost[1].title == "attempt 2 ended: handed back by its worker (shutdown) · worker b"
    assert slow.detail == "step, 2 lost"
    # Without the worker recorded lost, the expiry reads as such.
    again = timeline.build(run, steps, history, at(30)).lanes[2]
    assert "lease lapsed: its worker stopped renewing it" in again.segments[0].title


def sent(n: int, status: str, created: float, accepted: float | None, replied: float | None,
         **more: object) -> dict[str, object]:  # fmt: skip
    """An update as app.updates gives it."""
    return {
        "update_id": f"u-{n}", "name": "ask", "payload": f"secret-{n}", "status": status,
        "result": None, "error": None, "anchor_position": 0 if accepted else None, "seq": n,
        "created_at": at(created), "accepted_at": None if accepted is None else at(accepted),
        "completed_at": None if replied is None else at(replied), **more,
    }  # fmt: skip


def test_timeline_marks_updates_in_every_state_within_the_run() -> None:
    run = Run(
        "r4", "desk", 1, "desk", None, RunStatus.WAITING, None, None, None, "w",
        at(0), at(0), None, at(10),
    )  # fmt: skip
    now = at(20)
    updates = [
        sent(0, "completed", 1, 2, 4, result="ok-0"),
        sent(1, "failed", 5, 6, 7, error={"type": "KeyError", "message": "secret-1 unknown"}),
        sent(2, "rejected", 8, None, 8.5, error={"type": "UpdateRejected", "message": "no"}),
        sent(3, "accepted", 9, 10, None),
        sent(4, "requested", 15, None, None),
    ]
    updates[0] = {**updates[0], "created_at": at(1).isoformat()}  # a JSON reader's text
    drawn = timeline.build(run, [], [], now, updates=updates)
    lanes = [lane for lane in drawn.lanes if lane.kind == "update"]
    assert [lane.ref for lane in lanes] == ["u-0", "u-1", "u-2", "u-3", "u-4"]
    assert drawn.lanes[0].label == "run" and drawn.hidden_updates == 0
    marks = [[(m.kind, m.at, m.tone) for m in lane.marks] for lane in lanes]
    assert marks == [
        [("accepted", 10.0, "ok"), ("replied", 20.0, "ok")],
        [("accepted", 30.0, "bad"), ("replied", 35.0, "bad")],
        [("rejected", 42.5, "warn")],
        [("accepted", 50.0, "active")],  # no reply yet: its line runs to now
        [("requested", 75.0, "live")],
    ]
    assert [(s.start, s.width) for s in lanes[3].segments] == [(50.0, 50.0)]
    assert [(s.start, s.width) for s in lanes[4].segments] == [(75.0, 25.0)]
    assert (
        'reply "ok-0"' in lanes[0].marks[0].title
        and 'payload "secret-0"' in lanes[0].marks[0].title
    )
    assert lanes[1].marks[0].title.endswith("KeyError: secret-1 unknown")
    assert "no reply yet" in lanes[3].marks[0].title
    blind = timeline.build(run, [], [], now, updates=updates, payloads=False)
    titles = " ".join(m.title for lane in blind.lanes for m in lane.marks)
    assert "secret" not in titles and "ok-0" not in titles
    assert "id u-1 · failed" in titles and "· KeyError" in titles
    many = timeline.build(
        run, [], [], now, updates=[sent(n, "requested", 1, None, None) for n in range(25)]
    )
    assert sum(lane.kind == "update" for lane in many.lanes) == timeline.MAX_UPDATE_LANES
    assert many.hidden_updates == 25 - timeline.MAX_UPDATE_LANES
