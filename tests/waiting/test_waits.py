"""Durable waits on a real PostgreSQL: sleeps, signals, pause/resume, events, streams, Snooze."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing
from perdure.api import notices
from perdure.testing import drain

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def test_sleep_parks_the_run_without_a_worker_and_wakes_after(app: perdure.App) -> None:
    calls: list[str] = []

    @app.workflow("nap")
    async def nap(ctx: perdure.Context) -> str:
        await ctx.step("before", lambda: calls.append("before"))
        await ctx.sleep(timedelta(seconds=2))
        await ctx.step("after", lambda: calls.append("after"))
        return "rested"

    handle = app.start("nap")
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: handle.status() == "waiting", 20, what="the run to wait")
        run = handle.get()
        assert run.waiting_for is not None and run.waiting_for["sleep"] is True
        assert "until" in run.waiting_for
        wait_until(
            lambda: worker.worker.running == {} and handle.status() == "waiting",
            20,
            what="the worker to hold nothing while the run sleeps",
        )
        assert calls == ["before"]
        assert handle.result(timeout=20) == "rested"
    assert calls == ["before", "after"]
    steps = app.steps(handle.id)
    assert [(s.name, s.kind, s.status) for s in steps] == [
        ("before", "step", "completed"),
        ("sleep", "sleep", "completed"),
        ("after", "step", "completed"),
    ]
    assert steps[1].duration is not None and steps[1].duration >= 2


def test_resume_wakes_a_sleeping_run_early(app: perdure.App) -> None:
    @app.workflow("long_nap")
    async def long_nap(ctx: perdure.Context) -> str:
        await ctx.sleep(3600)
        return "awake"

    handle = app.start("long_nap")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 20, what="the run to sleep")
        app.resume(handle.id)
        assert handle.result(timeout=20) == "awake"


def test_signal_sent_before_and_after_the_wait_and_duplicates(app: perdure.App) -> None:
    @app.workflow("approval")
    async def approval(ctx: perdure.Context) -> list[Any]:
        first = await ctx.wait_for_signal("approve")
        second = await ctx.wait_for_signal("approve", timeout=60)
        return [first, second]

    handle = app.start("approval", key="approval:1")
    # Before the run reaches its wait (no worker yet): kept until consumed.
    early = app.signal(handle.id, "approve", {"by": "ada"}, key="sig-1")
    assert app.signal("approval:1", "approve", {"by": "ada"}, key="sig-1") == early
    with BackgroundWorker(app, **FAST):
        wait_until(
            lambda: (handle.get().waiting_for or {}).get("signal") == "approve",
            20,
            what="the second wait",
        )
        app.signal(handle.id, "approve", {"by": "grace"}, key="sig-2")
        assert handle.result(timeout=20) == [{"by": "ada"}, {"by": "grace"}]
    signals = app.signals(handle.id)
    assert [s["key"] for s in signals] == ["sig-1", "sig-2"]
    assert all(s["consumed_at"] is not None for s in signals)
    with pytest.raises(perdure.InvalidRunState, match="completed"):
        app.signal(handle.id, "approve", {})
    with pytest.raises(perdure.RunNotFound):
        app.signal("no-such-run", "approve", {})


def test_three_signals_are_delivered_in_order_one_per_wait(app: perdure.App) -> None:
    @app.workflow("collect")
    async def collect(ctx: perdure.Context) -> list[Any]:
        return [await ctx.wait_for_signal("item") for _ in range(3)]

    handle = app.start("collect")
    for n in (1, 2, 3):
        app.signal(handle.id, "item", n)
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == [1, 2, 3]


def test_signal_timeout_raises_signal_timeout(app: perdure.App) -> None:
    @app.workflow("impatient")
    async def impatient(ctx: perdure.Context) -> str:
        try:
            await ctx.wait_for_signal("reply", timeout=0.3)
        except perdure.SignalTimeout:
            return "gave up"
        return "answered"

    handle = app.start("impatient")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "gave up"
    (wait,) = app.steps(handle.id)
    assert (wait.kind, wait.status) == ("signal", "timed_out")


def test_signal_through_sql_wakes_the_run(app: perdure.App, pg_url: str, schema: str) -> None:
    @app.workflow("webhook")
    async def webhook(ctx: perdure.Context) -> Any:
        return await ctx.wait_for_signal("paid")

    handle = app.start("webhook", key="order:77")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 20, what="the wait")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                f"SELECT {schema}.send_signal('order:77', 'paid', '{{\"amount\": 5}}', 'pay-1')"
            )
        assert handle.result(timeout=20) == {"amount": 5}


def test_a_signal_to_a_parked_run_completes_its_wait_in_the_senders_transaction(
    app: perdure.App,
) -> None:
    ran: list[str] = []

    @app.workflow("handoff")
    async def handoff(ctx: perdure.Context) -> Any:
        payload = await ctx.wait_for_signal("go", timeout=600)
        await ctx.step("after", lambda: ran.append("after"))
        return payload

    handle = app.start("handoff")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 20, what="the wait")
    # No worker runs now: the sender alone completes the wait.
    signal_id = app.signal(handle.id, "go", {"n": 1})
    (wait,) = app.steps(handle.id)
    assert (wait.name, wait.kind, wait.status, wait.output) == (
        "signal:go",
        "signal",
        "completed",
        {"n": 1},
    )
    (signal,) = app.signals(handle.id)
    assert signal["consumed_at"] is not None and signal["consumed_position"] == wait.position
    consumed = [e for e in app.history(handle.id) if e.event == "signal_consumed"]
    assert [(e.step_name, e.detail) for e in consumed] == [("signal:go", {"signal_id": signal_id})]
    assert handle.status() == "waiting"
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == {"n": 1}
    assert ran == ["after"]


def test_a_signal_to_a_paused_run_waits_for_the_resume(app: perdure.App) -> None:
    @app.workflow("held_handoff")
    async def held_handoff(ctx: perdure.Context) -> Any:
        return await ctx.wait_for_signal("go")

    handle = app.start("held_handoff")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 20, what="the wait")
        app.pause(handle.id)
        app.signal(handle.id, "go", "later")
        (signal,) = app.signals(handle.id)
        assert signal["consumed_at"] is None
        assert [s.status for s in app.steps(handle.id)] == ["waiting"]
        app.resume(handle.id)
        assert handle.result(timeout=20) == "later"


def test_signals_from_many_threads_race_with_the_wait_and_none_is_lost(
    app: perdure.App,
) -> None:
    @app.workflow("tally")
    async def tally(ctx: perdure.Context) -> int:
        return sum([await ctx.wait_for_signal("vote") for _ in range(20)])

    handle = app.start("tally")
    with BackgroundWorker(app, **FAST):
        threads = [
            threading.Thread(
                target=app.signal, args=(handle.id, "vote", 1), kwargs={"key": f"v{i}"}
            )
            for i in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert handle.result(timeout=30) == 20


def test_pause_keeps_a_run_from_being_claimed_until_resumed(app: perdure.App) -> None:
    @app.workflow("pausable")
    async def pausable(ctx: perdure.Context) -> str:
        return await ctx.step("work", lambda: "done")

    handle = app.start("pausable")
    assert app.pause(handle.id).status == "paused"
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: worker.count("worker_idle") >= 2, 20, what="idle claims")
        assert handle.status() == "paused"
        app.resume(handle.id)
        assert handle.result(timeout=20) == "done"


def test_a_running_run_pauses_at_its_next_ctx_call(app: perdure.App) -> None:
    gate = threading.Event()

    def block() -> str:
        gate.wait(20)
        return "first"

    @app.workflow("two_steps")
    async def two_steps(ctx: perdure.Context) -> list[str]:
        a = await ctx.step("a", block)
        b = await ctx.step("b", lambda: "second")
        return [a, b]

    handle = app.start("two_steps")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "running", 20, what="the run to start")
        app.pause(handle.id)
        gate.set()
        wait_until(lambda: [s.name for s in app.steps(handle.id)] == ["a"], 20, what="step a")
        wait_until(lambda: not app.workers()[0].held, 20, what="the task to be parked")
        assert handle.status() == "paused"
        app.resume(handle.id)
        assert handle.result(timeout=20) == ["first", "second"]


def test_events_are_readable_from_outside_while_the_run_waits(app: perdure.App) -> None:
    @app.workflow("payment")
    async def payment(ctx: perdure.Context) -> str:
        await ctx.set_event("payment_url", "https://pay.example/abc")
        await ctx.wait_for_signal("paid")
        return "ok"

    handle = app.start("payment")
    with pytest.raises(perdure.EventTimeout):
        app.get_event(handle.id, "payment_url", timeout=0.05)
    with BackgroundWorker(app, **FAST):
        assert app.get_event(handle.id, "payment_url", timeout=20) == "https://pay.example/abc"
        app.signal(handle.id, "paid")
        assert handle.result(timeout=20) == "ok"


def test_a_stream_is_read_while_it_is_written(app: perdure.App) -> None:
    @app.workflow("tokens")
    async def tokens(ctx: perdure.Context) -> int:
        for word in ["durable", "work", "in", "postgres"]:
            await ctx.write_stream("out", word)
        await ctx.wait_for_signal("go")
        await ctx.write_stream("out", "done")
        await ctx.close_stream("out")
        return 5

    handle = app.start("tokens")
    with BackgroundWorker(app, **FAST):
        reader = app.read_stream(handle.id, "out", timeout=20)
        assert [next(reader) for _ in range(4)] == ["durable", "work", "in", "postgres"]
        wait_until(lambda: handle.status() == "waiting", 20, what="the wait for go")
        app.signal(handle.id, "go")
        assert list(reader) == ["done"]
        assert handle.result(timeout=20) == 5


def test_snooze_parks_the_step_without_counting_an_attempt(app: perdure.App) -> None:
    calls: list[int] = []

    def rate_limited() -> Any:
        calls.append(1)
        if len(calls) < 3:
            return perdure.Snooze(0.1, reason="429 Too Many Requests")
        return "served"

    @app.workflow("polite")
    async def polite(ctx: perdure.Context) -> Any:
        return await ctx.step("call", rate_limited, retry=perdure.RetryPolicy(max_attempts=1))

    handle = app.start("polite")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "served"
    (step,) = app.steps(handle.id)
    assert (step.status, step.attempts) == ("completed", 1)
    snoozes = [e for e in app.history(handle.id) if e.event == "step_snoozed"]
    assert len(snoozes) == 2 and snoozes[0].detail is not None
    assert snoozes[0].detail["reason"] == "429 Too Many Requests"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "exactly one of them"),
        ((5,), {"until": datetime(2030, 1, 1, tzinfo=UTC)}, "exactly one of them"),
        ((), {"until": datetime(2030, 1, 1)}, "timezone-aware"),
        ((-1,), {}, "cannot be negative"),
    ],
)
def test_a_snooze_needs_one_valid_time(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        perdure.Snooze(*args, **kwargs)


def test_a_timed_out_signal_wait_times_out_again_on_replay(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    outcomes: list[str] = []

    @app.workflow("two_waits")
    async def two_waits(ctx: perdure.Context) -> Any:
        try:
            await ctx.wait_for_signal("first", timeout=60)
            outcomes.append("first came")
        except perdure.SignalTimeout:
            outcomes.append("first timed out")
        return await ctx.wait_for_signal("second")

    handle = app.start("two_waits")
    testing.drain(app)
    clock.advance(seconds=120)
    testing.drain(app)
    assert handle.status() == perdure.RunStatus.WAITING
    # The signal wakes the run: its replay meets the recorded time-out again.
    app.signal(handle.id, "first", "too late")
    app.signal(handle.id, "second", "ok")
    testing.drain(app)
    assert handle.result(timeout=5) == "ok"
    assert outcomes == ["first timed out", "first timed out"]


def test_snooze_until_a_moment_is_measured_on_the_apps_clock(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    start = datetime(2024, 3, 29, 12, tzinfo=UTC)
    clock = perdure.VirtualClock(start)
    app = make_app(clock=clock)
    calls: list[int] = []

    def later() -> Any:
        calls.append(1)
        if len(calls) == 1:
            return perdure.Snooze(until=start + timedelta(hours=1), reason="closed")
        return "open"

    @app.workflow("shop")
    def shop(ctx: perdure.SyncContext) -> Any:
        return ctx.step("visit", later)

    handle = app.start("shop")
    drain(app)
    # On the machine's clock that moment passed long ago; on the App's it is an hour away.
    assert len(calls) == 1 and not handle.status().is_final
    (due,) = db.execute("SELECT available_at FROM tasks WHERE run_id = %s", [handle.id]).fetchone()
    assert due == start + timedelta(hours=1)
    clock.advance(hours=1)
    drain(app)
    assert handle.result(timeout=0) == "open" and len(calls) == 2


def test_get_event_and_read_stream_are_woken_by_the_publication(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a notification the waiters would look again only after 60 s.
    monkeypatch.setattr(notices, "FALLBACK_SECONDS", 60.0)

    @app.workflow("announce")
    async def announce(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("go")
        await ctx.write_stream("ticks", 1)
        await ctx.set_event("ready", "yes")
        await ctx.wait_for_signal("more")
        await ctx.write_stream("ticks", 2)
        await ctx.close_stream("ticks")

    handle = app.start("announce")
    with BackgroundWorker(app, **FAST):
        ticks = app.read_stream(handle.id, "ticks", timeout=30)
        app.signal(handle.id, "go")
        assert app.get_event(handle.id, "ready", timeout=30) == "yes"
        assert next(ticks) == 1
        app.signal(handle.id, "more")
        assert list(ticks) == [2]
        assert handle.result(timeout=30) is None
