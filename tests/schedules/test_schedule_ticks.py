"""Ticking on a virtual clock: one run per tick, catch-up policies, pause and resume, trigger.

Every test moves a VirtualClock and calls ``app.tick_schedules()``, the round
a worker's ticker runs, so hours of ticks take milliseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import perdure
from perdure.testing import drain

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

START = datetime(2024, 3, 29, 12, 0, tzinfo=UTC)
TEN_MINUTES = "*/10 * * * *"


def at(hour: int, minute: int) -> datetime:
    return datetime(2024, 3, 29, hour, minute, tzinfo=UTC)


@pytest.fixture
def clock() -> perdure.VirtualClock:
    return perdure.VirtualClock(START)


@pytest.fixture
def sched_app(make_app: Callable[..., perdure.App], clock: perdure.VirtualClock) -> perdure.App:
    app = make_app(clock=clock)

    @app.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> dict[str, Any]:
        covered = ctx.scheduled_at.isoformat() if ctx.scheduled_at else None
        return {"input": input, "schedule": ctx.schedule, "scheduled_at": covered}

    app.register()
    return app


def _runs(db: psycopg.Connection[Any]) -> list[tuple[str, datetime, str]]:
    rows = db.execute(
        "SELECT key, scheduled_at, schedule FROM runs WHERE schedule IS NOT NULL "
        "ORDER BY scheduled_at"
    ).fetchall()
    return [(str(k), s, str(n)) for k, s, n in rows]


def test_each_tick_starts_one_run_that_knows_the_tick_it_covers(
    sched_app: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report", input={"k": 1})
    assert sched_app.tick_schedules() == [], "nothing is due before the first tick"
    clock.advance(minutes=10)
    (handle,) = sched_app.tick_schedules()
    assert sched_app.tick_schedules() == [], "a tick is started once"
    run = sched_app.get_run(handle.id)
    assert (run.key, run.schedule, run.scheduled_at) == (
        "schedule:ten:2024-03-29T12:10:00Z",
        "ten",
        at(12, 10),
    )
    drain(sched_app)
    assert handle.result(timeout=5) == {
        "input": {"k": 1},
        "schedule": "ten",
        "scheduled_at": "2024-03-29T12:10:00+00:00",
    }
    info = sched_app.get_schedule("ten")
    assert (info.last_tick, info.last_run_id, info.next_tick) == (at(12, 10), handle.id, at(12, 20))

    # The key is the backstop: a worker that still saw the old next_tick
    # (forced here) starts nothing new for the same tick.
    db.execute("UPDATE schedules SET next_tick = %s", (at(12, 10),))
    (again,) = sched_app.tick_schedules()
    assert (again.id, again.created) == (handle.id, False)
    assert len(_runs(db)) == 1


def test_a_test_app_ticks_without_a_worker_having_registered_it(
    make_app: Callable[..., perdure.App], clock: perdure.VirtualClock
) -> None:
    app = make_app(clock=clock)

    @app.workflow("nightly_report")
    def nightly_report(ctx: perdure.SyncContext, input: Any) -> str:
        return f"{input} for {ctx.scheduled_at:%Y-%m-%d}"

    app.add_schedule("nightly", "0 2 * * *", workflow="nightly_report", input="totals")
    clock.advance(days=1)
    (run,) = app.tick_schedules()
    drain(app)
    assert run.result(timeout=0) == "totals for 2024-03-30"


def test_graph_steps_read_the_tick_too(
    make_app: Callable[..., perdure.App], clock: perdure.VirtualClock
) -> None:
    app = make_app(clock=clock)
    graph = app.graph("etl")

    @graph.step()
    def extract(ctx: perdure.StepContext, input: Any) -> str | None:
        return ctx.scheduled_at.isoformat() if ctx.scheduled_at else None

    app.schedule(TEN_MINUTES, workflow="etl")
    app.register()
    clock.advance(minutes=10)
    (handle,) = app.tick_schedules()
    drain(app)
    assert handle.result(timeout=5) == {"extract": "2024-03-29T12:10:00+00:00"}


def test_latest_starts_the_most_recent_missed_tick_only(
    sched_app: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report")  # catchup="latest"
    clock.advance(hours=3)  # no worker for three hours: 18 ticks missed
    sched_app.tick_schedules()
    assert _runs(db) == [("schedule:ten:2024-03-29T15:00:00Z", at(15, 0), "ten")]
    assert sched_app.get_schedule("ten").next_tick == at(15, 10)


def test_all_starts_every_missed_tick_up_to_max_catchup(
    sched_app: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    sched_app.add_schedule("few", TEN_MINUTES, workflow="report", catchup="all")
    sched_app.add_schedule("many", TEN_MINUTES, workflow="report", catchup="all", max_catchup=4)
    clock.advance(minutes=35)
    sched_app.tick_schedules()
    assert [s for _, s, n in _runs(db) if n == "few"] == [at(12, 10), at(12, 20), at(12, 30)]
    clock.advance(hours=3)
    sched_app.tick_schedules()
    many = [s for _, s, n in _runs(db) if n == "many"]
    # The four most recent of the 18 missed; the 14 before them are skipped.
    assert many == [at(12, 10), at(12, 20), at(12, 30)] + [at(15, m) for m in (0, 10, 20, 30)]
    assert len([n for _, _, n in _runs(db) if n == "few"]) == 3 + 18


def test_skip_starts_no_missed_tick_and_goes_on_from_now(
    sched_app: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report", catchup="skip")
    clock.advance(hours=3, minutes=2)  # 15:00 is two minutes old: missed too
    assert sched_app.tick_schedules() == []
    assert _runs(db) == []
    assert sched_app.get_schedule("ten").next_tick == at(15, 10)
    clock.advance(minutes=8, seconds=30)  # on time again: 15:10 is 30 s old
    sched_app.tick_schedules()
    assert [s for _, s, _ in _runs(db)] == [at(15, 10)]


@pytest.mark.parametrize(("catchup", "expected"), [("latest", [at(13, 0)]), ("skip", [])])
def test_pause_stops_ticks_and_resume_applies_the_catchup_policy(
    sched_app: perdure.App,
    clock: perdure.VirtualClock,
    db: psycopg.Connection[Any],
    catchup: str,
    expected: list[datetime],
) -> None:
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report", catchup=catchup)
    assert sched_app.pause_schedule("ten").paused
    clock.advance(hours=1, minutes=5)
    assert sched_app.tick_schedules() == []
    assert sched_app.get_schedule("ten").next_tick == at(12, 10), "paused: next tick kept"
    # Re-adding the schedule (a deploy) keeps it paused.
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report", catchup=catchup)
    assert sched_app.tick_schedules() == [] and sched_app.get_schedule("ten").paused
    assert not sched_app.resume_schedule("ten").paused
    sched_app.tick_schedules()
    assert [s for _, s, _ in _runs(db)] == expected
    assert sched_app.get_schedule("ten").next_tick == at(13, 10)


def test_trigger_starts_a_run_now_and_leaves_the_ticks_alone(
    sched_app: perdure.App, clock: perdure.VirtualClock
) -> None:
    sched_app.add_schedule("ten", TEN_MINUTES, workflow="report", input="now")
    clock.advance(minutes=3)
    handle = sched_app.trigger_schedule("ten")
    run = sched_app.get_run(handle.id)
    assert (run.schedule, run.scheduled_at, run.key, run.input) == ("ten", at(12, 3), None, "now")
    info = sched_app.get_schedule("ten")
    assert (info.next_tick, info.last_tick) == (at(12, 10), None)


def test_a_schedule_that_cannot_start_does_not_stop_the_others(
    sched_app: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    sched_app.add_schedule("broken", TEN_MINUTES, workflow="report")
    sched_app.add_schedule("fine", TEN_MINUTES, workflow="report")
    db.execute("UPDATE schedules SET workflow = 'gone' WHERE name = 'broken'")
    clock.advance(minutes=10)
    started = sched_app.tick_schedules()
    assert [sched_app.get_run(h.id).schedule for h in started] == ["fine"]
    assert sched_app.get_schedule("broken").next_tick == at(12, 10), "left due, nothing written"


def test_concurrent_tickers_start_each_tick_once(
    make_app: Callable[..., perdure.App], clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    owner = make_app(clock=clock)

    @owner.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> None:
        return None

    owner.register()
    for n in range(6):
        owner.add_schedule(f"s{n}", "* * * * *", workflow="report", catchup="all")
    tickers = [make_app(clock=clock) for _ in range(4)]
    for minute in range(5):
        clock.advance(minutes=1)
        barrier = threading.Barrier(len(tickers))

        def tick(app: perdure.App, barrier: threading.Barrier) -> None:
            barrier.wait()
            app.tick_schedules()

        threads = [threading.Thread(target=tick, args=(t, barrier)) for t in tickers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        runs = _runs(db)
        assert len(runs) == 6 * (minute + 1), runs
    keys = [k for k, _, _ in runs]
    assert len(set(keys)) == len(keys) == 30
    ticks = {(n, s) for _, s, n in runs}
    assert ticks == {(f"s{n}", START + timedelta(minutes=m)) for n in range(6) for m in range(1, 6)}
