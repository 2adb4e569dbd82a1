"""What a start costs a fleet does not grow with its size.

PostgreSQL delivers a notification to every session listening on its channel,
so only the first two workers of a queue (by id) listen on the shared
channel; the others hear only calls passed on to them alone, on a channel of
their own, by a listener too busy to answer. A schedule written elsewhere
tells the ticker at once, so the ticker need not poll. A worker bounds the
connections it opens, and says at start when they cannot fit the server.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.engine.wakeup import LISTENERS, Wakeup
from perdure.errors import ConfigurationError
from perdure.store.statements.schedules import SCHEDULES_PAYLOAD

QUEUE = "scale"


def _settled(fleet: dict[str, BackgroundWorker], queue: str) -> bool:
    """Whether each worker knows its place among the queue's workers, and listens
    on the shared channel exactly when it is among the first LISTENERS."""
    for place, worker in enumerate(fleet.values()):
        beats = worker.recorder.args("ranked")  # (rank, queue_ranks) of each heartbeat
        if not beats or beats[-1][1].get(queue) != place:
            return False
        if worker.worker.attendance.listening() != (place < LISTENERS):
            return False
    return True


def _wakeup(worker: BackgroundWorker) -> Wakeup:
    wakeup = worker.worker.attendance._wakeup
    assert wakeup is not None
    return wakeup


def _worker(app: perdure.App, wid: str) -> BackgroundWorker:
    return BackgroundWorker(app, worker_id=wid, concurrency=1, idle_poll_seconds=60.0)


def test_only_the_first_two_workers_of_a_queue_listen_and_the_rest_stay_asleep(
    define: perdure.App, stack: ExitStack
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3", "w4", "w5")}
    wait_until(lambda: _settled(fleet, "scale"), 30, what="the fleet's places")
    quiet = {wid: (w.count("worker_idle"), list(w.worker.wake_checks)) for wid, w in fleet.items()}
    for value in range(5):
        assert app.start("quick", value).result(timeout=20) == value * 2
    # The second checks within about 10 ms of each start. The last three would
    # have heard each start by the end of two waits of their wakeup threads.
    second = fleet["w2"].worker
    wait_until(lambda: second.wake_checks[0] > quiet["w2"][1][0], 10, what="w2's check")
    rounds = {wid: _wakeup(fleet[wid]).rounds for wid in ("w3", "w4", "w5")}
    wait_until(
        lambda: all(_wakeup(fleet[wid]).rounds >= n + 2 for wid, n in rounds.items()),
        10,
        what="two more waits of each of the last three",
    )
    for wid in ("w3", "w4", "w5"):
        worker = fleet[wid]
        assert (worker.count("worker_idle"), worker.worker.wake_checks) == quiet[wid], wid
        assert worker.count("execution_started") == 0


def test_a_call_the_listeners_are_too_busy_for_is_passed_on_to_the_next_worker(
    define: perdure.App, stack: ExitStack, release: threading.Event
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3")}
    held = [app.start("held") for _ in fleet]
    wait_until(
        lambda: all(len(w.worker.running) == 1 for w in fleet.values()),
        20,
        what="each listener to hold a blocking run",
    )
    fleet["w4"] = stack.enter_context(_worker(app, "w4"))
    wait_until(lambda: _settled(fleet, "scale"), 30, what="w4 to stop listening")
    # w4 hears nothing on the shared channel and polls once a minute: only a
    # call passed on to it lets it take the run within seconds.
    assert app.start("quick", 4).result(timeout=10) == 8
    assert fleet["w4"].count("execution_finished") == 1
    assert sum(w.worker.attendance.forwarded for w in fleet.values()) >= 1
    release.set()
    assert [h.result(timeout=20) for h in held] == ["released"] * 3


def test_a_schedule_written_or_paused_notifies_the_ticker(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    @app.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> Any:
        return input

    app.ensure_schema()
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{schema}_wakeup"')

        def heard() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=2, stop_after=1)]

        app.add_schedule("nightly", "0 3 * * *", workflow="report")
        assert heard() == [SCHEDULES_PAYLOAD]
        app.add_schedule("nightly", "0 3 * * *", workflow="report")  # unchanged: no news
        assert heard() == []
        app.pause_schedule("nightly")
        assert heard() == [SCHEDULES_PAYLOAD]


def test_a_worker_says_at_start_when_its_connections_cannot_fit_the_server(
    define: perdure.App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="perdure.worker")
    with BackgroundWorker(define, worker_id="small") as worker:
        wait_until(lambda: worker.count("heartbeat") > 0, 20, what="the first heartbeat")
    assert not [r for r in caplog.records if "max_connections" in r.getMessage()]
    with BackgroundWorker(define, worker_id="greedy", pool_size=5000) as worker:
        wait_until(lambda: worker.count("heartbeat") > 0, 20, what="the first heartbeat")
    (warning,) = [r.getMessage() for r in caplog.records if "max_connections" in r.getMessage()]
    numbers = "up to 7502 server connections (statement pool 5000, ctx.transaction pool 2500"
    assert numbers in warning
    assert "--pool-size" in warning


def test_the_pool_size_bounds_the_connections_a_worker_opens() -> None:
    options = perdure.WorkerOptions()
    assert (options.statement_pool_size, options.client_connections) == (20, 30)
    small = perdure.WorkerOptions(concurrency=4)
    assert (small.statement_pool_size, small.client_connections) == (8, 12)
    assert perdure.WorkerOptions(pool_size=50).client_connections == 75
    with pytest.raises(ConfigurationError, match="pool_size"):
        perdure.WorkerOptions(pool_size=0)


def test_the_ticker_of_an_idle_fleet_looks_only_when_told(
    define: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perdure.engine import schedules

    rounds: list[float] = []
    tick_due = schedules.tick_due

    async def counted(store: Any, limit: int = 100) -> Any:
        rounds.append(time.monotonic())
        return await tick_due(store, limit)

    monkeypatch.setattr(schedules, "tick_due", counted)

    @define.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> Any:
        return input

    # A fallback poll of 0.1 s: the ticker used to look that often.
    with BackgroundWorker(define, worker_id="duty", poll_seconds=0.1) as worker:
        wait_until(lambda: len(rounds) >= 1, 20, what="the ticker's first look")
        wait_until(lambda: worker.worker.attendance.listening(), 20, what="the listener")
        looked = len(rounds)
        wait_until(lambda: time.monotonic() - rounds[-1] > 2.0, 10, what="two quiet seconds")
        assert len(rounds) == looked, "the ticker looked without being told"
        define.add_schedule("nightly", "0 3 * * *", workflow="report")
        wait_until(lambda: len(rounds) > looked, 10, what="the ticker to look at the new schedule")


def test_a_run_due_later_wakes_only_the_first_worker_the_others_check(
    define: perdure.App, stack: ExitStack
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3")}
    wait_until(lambda: _settled(fleet, "scale"), 30, what="the fleet's places")
    quiet = {wid: (w.count("worker_idle"), w.worker.wake_checks[0]) for wid, w in fleet.items()}
    handle = app.start("quick", 3, delay=3.0)
    worker = fleet["w2"]
    # Told of the run, it checks on its wakeup thread (within about 10 ms) and
    # sets no timer of its claim loop: it checks again once it is due.
    wait_until(
        lambda: worker.worker.wake_checks[0] > quiet["w2"][1],
        2.5,
        what="w2 to check the run due later",
    )
    for wid in ("w2", "w3"):
        assert fleet[wid].count("worker_idle") == quiet[wid][0], f"{wid} woke its claim loop"
    assert fleet["w1"].count("worker_idle") > quiet["w1"][0], "w1 set no timer"
    assert handle.result(timeout=20) == 6
