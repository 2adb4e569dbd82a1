"""A worker's less travelled paths: lost connections, a stop that cannot wait, no work.

A connection is lost for real: the test terminates the worker's backend from
another session (pg_terminate_backend), the way a failover, a DBA or an
idle-connection reaper does, and checks that the worker notices and goes on
without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.engine.watchdog import LoopWatch


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session of the test's own, which terminates the worker's backends."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def _backends(admin: psycopg.Connection[Any], application_name: str) -> int:
    found = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ).fetchone()
    return int(found[0]) if found else 0


def _terminate(admin: psycopg.Connection[Any], application_name: str) -> int:
    found = admin.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s",
        (application_name,),
    ).fetchone()
    return int(found[0]) if found else 0


def test_a_worker_whose_listen_connection_dies_listens_again(
    app: perdure.App, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: int) -> int:
        return value

    listen = "perdure-worker-deaf-listen"
    # The fallback poll is a minute: a run started after the cut completes
    # within the test's bound only if a notification wakes the worker, that
    # is if its LISTEN connection came back.
    options = {"worker_id": "deaf", "poll_seconds": 60.0, "idle_poll_seconds": 60.0}
    with BackgroundWorker(app, **options) as worker:
        wait_until(lambda: _backends(admin, listen) == 1, what="the worker to LISTEN")
        wait_until(lambda: worker.count("worker_idle") > 0, what="the worker to go idle")
        assert _terminate(admin, listen) == 1
        wait_until(
            lambda: any("listener lost its connection" in r.getMessage() for r in caplog.records),
            what="the worker to notice the lost LISTEN connection",
        )
        wait_until(lambda: _backends(admin, listen) == 1, what="the worker to LISTEN again")
        handle = app.start("echo", 7)
        assert handle.result(timeout=30) == 7


def test_a_run_still_executing_when_the_shutdown_time_is_up_is_handed_back(
    app: perdure.App,
) -> None:
    calls: list[int] = []

    async def slow() -> str:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(3600)  # cancelled by the worker's stop
        return "done"

    @app.workflow("slow")
    async def workflow(ctx: perdure.Context) -> str:
        return await ctx.step("slow", slow)  # type: ignore[no-any-return]

    handle = app.start("slow")
    worker = BackgroundWorker(app, worker_id="leaving", poll_seconds=0.05, shutdown_seconds=0.2)
    try:
        wait_until(lambda: calls, what="the step to start")
    finally:
        worker.stop()
    # Handed back at once (not left to its lease): queued again, nothing checkpointed.
    assert app.get_run(handle.id).status == perdure.RunStatus.QUEUED
    assert app.steps(handle.id) == []
    assert "run_released" in [e.event for e in app.history(handle.id)]
    with BackgroundWorker(app, poll_seconds=0.05):
        assert handle.result(timeout=30) == "done"
    assert len(calls) == 2


def test_a_worker_with_no_workflow_to_serve_is_refused(app: perdure.App) -> None:
    with pytest.raises(perdure.ConfigurationError, match="at least one workflow"):
        perdure.Worker(app.url, app.statements, {})


def test_a_stop_at_once_hands_back_a_running_run_without_waiting(app: perdure.App) -> None:
    started = threading.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(3600)  # cancelled by the stop
        return "never"

    @app.workflow("slow")
    async def workflow(ctx: perdure.Context) -> str:
        return await ctx.step("slow", slow)  # type: ignore[no-any-return]

    handle = app.start("slow")
    # The shutdown time is long: only the stop at once ends the wait early.
    worker = BackgroundWorker(app, poll_seconds=0.05, shutdown_seconds=3600)
    try:
        assert started.wait(30), "the step did not start"
        worker.loop.call_soon_threadsafe(worker.worker.request_stop)
        worker.loop.call_soon_threadsafe(lambda: worker.worker.request_stop(at_once=True))
        worker.thread.join(30)
        assert not worker.thread.is_alive(), "the worker waited for its run"
    finally:
        worker.stop()
    assert app.get_run(handle.id).status == perdure.RunStatus.QUEUED
    assert "run_released" in [e.event for e in app.history(handle.id)]


def test_a_loop_held_by_the_workers_own_code_blames_no_run(
    app: perdure.App, caplog: pytest.LogCaptureFixture
) -> None:
    async def nap() -> None:
        await asyncio.sleep(3.0)

    @app.workflow("napping")
    async def napping(ctx: perdure.Context) -> None:
        await ctx.step("nap", nap)

    caplog.set_level(logging.DEBUG, logger="perdure.worker")
    with BackgroundWorker(app, poll_seconds=0.05, blocked_loop_seconds=0.1) as worker:
        # The loop is watched while a run executes (an idle worker's loop is
        # not pinged): a run that awaits, and does not hold the loop.
        app.start("napping")
        wait_until(lambda: worker.count("execution_started"), what="the run to start")
        wakeup = worker.worker.attendance._wakeup
        assert wakeup is not None
        (watch,) = [chore for chore in wakeup.chores if isinstance(chore, LoopWatch)]
        wait_until(lambda: watch.pinging, 5, what="the loop watch to ping the loop")
        # A callback of the loop that is no run's task holds it for a moment.
        worker.loop.call_soon_threadsafe(time.sleep, 1.0)
        wait_until(
            lambda: any("slow to answer" in r.getMessage() for r in caplog.records),
            what="the loop watch to notice",
        )
    assert not any("blocked" in r.getMessage() for r in caplog.records)


def test_an_idle_worker_wakes_for_work_another_writes_due_in_a_moment(app: perdure.App) -> None:
    """A run started with a short delay notifies when written: the idle worker sets
    its timer instead of finding it at its minute-long fallback poll."""

    @app.workflow("later")
    async def later(ctx: perdure.Context, value: int) -> int:
        return value

    options = {"worker_id": "timer", "poll_seconds": 60.0, "idle_poll_seconds": 60.0}
    with BackgroundWorker(app, **options) as worker:
        wait_until(lambda: worker.count("worker_idle") > 0, what="the worker to go idle")
        idle = worker.count("worker_idle")
        handle = app.start("later", 5, delay=1.0)
        # Woken by the start's notification, the worker looks (and finds nothing due yet).
        wait_until(lambda: worker.count("worker_idle") > idle, 10, what="the notification")
        # Its timer, not its poll, takes the run a second later: well within 60 s.
        assert handle.result(timeout=20) == 5


def test_a_task_taken_away_is_reported_and_stops_at_its_next_ctx_call(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    """The heartbeat finds the task held by another worker now: the worker says so,
    and the workflow stops at its next ``ctx`` call, before that step's body runs."""
    between = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    @app.workflow("taken")
    async def taken(ctx: perdure.Context) -> str:
        await ctx.step("first", lambda: ran.append("first"))
        between.set()
        await asyncio.to_thread(release.wait, 20)  # the workflow's own code, between steps
        await ctx.step("second", lambda: ran.append("second"))
        return "done"

    handle = app.start("taken")
    with BackgroundWorker(app, worker_id="loser", heartbeat_seconds=0.05) as worker:
        try:
            wait_until(between.is_set, 20, what="the workflow between its steps")
            db.execute(
                "UPDATE tasks SET worker_id = 'thief', attempt = attempt + 1 "
                "WHERE run_id = %s AND status = 'claimed'",
                (handle.id,),
            )
            wait_until(lambda: worker.count("lease_taken") == 1, 20, what="the loss reported")
        finally:
            release.set()
        wait_until(
            lambda: worker.count("execution_finished") == 1, 20, what="the execution to stop"
        )
    assert ran == ["first"], "the step after the loss ran its body"
    (owner,) = db.execute(
        "SELECT worker_id FROM tasks WHERE run_id = %s AND kind = 'run'", (handle.id,)
    ).fetchone()
    assert owner == "thief"
    # No checkpoint of "second": its body never ran (that of "first" may
    # have been refused too, when its write was deferred past the theft).
    assert "second" not in [s.name for s in app.steps(handle.id)]


def test_a_task_handed_back_and_claimed_again_is_not_taken_for_lost(app: perdure.App) -> None:
    """A run that parks and is claimed again keeps its task's id under a new attempt:
    a heartbeat that saw the task between the two must not stop the new execution."""

    @app.workflow("naps")
    async def naps(ctx: perdure.Context, n: int) -> int:
        for _ in range(n):
            await ctx.sleep(0.001)
        return n

    handle = app.start("naps", 40)
    assert app.run_until_complete(handle, heartbeat_seconds=0.002) == 40


def test_an_idle_worker_does_not_ping_its_loop(app: perdure.App) -> None:
    """Only a run's code can block the loop: an idle worker's loop sleeps until it has work."""

    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> None:
        return None

    with BackgroundWorker(app, lease_seconds=2.0) as worker:
        app.start("noop").result(timeout=20)
        wakeup = worker.worker.attendance._wakeup
        assert wakeup is not None
        (watch,) = [chore for chore in wakeup.chores if isinstance(chore, LoopWatch)]
        beats = worker.count("heartbeat")
        wait_until(
            lambda: worker.count("heartbeat") >= beats + 2,
            20,
            what="two heartbeats while idle",
        )
        assert not watch.pinging


def test_a_wakeup_thread_stops_at_once_in_the_middle_of_a_long_wait(pg_url: str) -> None:
    """``Wakeup.stop`` ends the thread's wait for a notification at once: an
    idle worker's tick could otherwise hold every stop for up to its length."""
    from perdure.engine.wakeup import Wakeup

    async def scenario() -> tuple[bool, bool]:
        wakeup = Wakeup(pg_url, "perdure_test_stop", busy=lambda: False, idle_tick=60.0)
        wakeup.start()
        assert await asyncio.to_thread(wakeup.connected.wait, 30.0)
        thread = wakeup._thread
        assert thread is not None
        await asyncio.sleep(0.2)  # the thread is now in its 60 s wait
        stop = asyncio.ensure_future(wakeup.stop())
        # Well before the tick, and before the stop's own join gives up (10 s).
        done, _ = await asyncio.wait({stop}, timeout=5.0)
        return bool(done), thread.is_alive()

    stopped, alive = asyncio.run(scenario())
    assert stopped, "the stop waited for the idle tick"
    assert not alive
