"""A fleet of idle workers answers a notification without a thundering herd.

Every worker LISTENs, so every one hears of each ready task. Only the first
live worker serving the task's queue claims at once; the next checks a
moment later, with one cheap query on its wakeup thread, that the work was
taken (and claims it when it was not: the first was full); the others check
later still, at most about five times a second however many notifications
come. A worker never claims for a queue it does not serve.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker, wait_until


def _ranks_settled(fleet: dict[str, BackgroundWorker], queue: str) -> bool:
    """Whether each worker's last heartbeat gave it its place among the queue's workers."""
    for place, worker in enumerate(fleet.values()):
        beats = worker.recorder.args("ranked")  # (rank, queue_ranks) of each heartbeat
        if not beats or beats[-1][1].get(queue) != place:
            return False
    return True


@pytest.fixture
def fleet(app: perdure.App, release: threading.Event) -> Iterator[dict[str, BackgroundWorker]]:
    """Three idle workers of the queue ``herd`` (w1 first, by id), ranks settled."""

    @app.workflow("quick", queue="herd")
    async def quick(ctx: perdure.Context, value: int) -> int:
        return await ctx.step("double", lambda: value * 2)

    @app.workflow("held", queue="herd")
    async def held(ctx: perdure.Context) -> str:
        return await ctx.step("wait", lambda: "released" if release.wait(30) else "timed out")

    with ExitStack() as stack:
        fleet = {
            wid: stack.enter_context(
                BackgroundWorker(app, worker_id=wid, concurrency=1, idle_poll_seconds=60.0)
            )
            for wid in ("w1", "w2", "w3")
        }
        stack.callback(release.set)
        wait_until(lambda: _ranks_settled(fleet, "herd"), 20, what="the fleet's ranks")
        yield fleet


def _claims(worker: BackgroundWorker) -> int:
    """How many claim passes the worker made (each ends with worker_idle or a full batch)."""
    return worker.count("worker_idle")


def _after_the_first_claimed(
    monkeypatch: pytest.MonkeyPatch, worker: BackgroundWorker, first: BackgroundWorker
) -> None:
    """Hold ``worker``'s checks (on its wakeup thread) until ``first`` has started an
    execution: the check a responsive first worker is ahead of, however loaded the
    machine (the first's claim can otherwise take longer than the CONFIRM_SECONDS
    after which the second looks, and the second then rightly takes the run)."""
    started = first.count("execution_started")
    due = worker.worker.claims.due

    def due_once_claimed(queues: list[str] | None = None) -> Any:
        wait_until(lambda: first.count("execution_started") > started, 20, what="w1's claim")
        return due(queues)

    monkeypatch.setattr(worker.worker.claims, "due", due_once_claimed)


def test_only_the_queues_first_worker_claims_and_the_others_only_check(
    app: perdure.App, fleet: dict[str, BackgroundWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = fleet.values()
    for other in (second, third):
        _after_the_first_claimed(monkeypatch, other, first)
    before = {wid: _claims(w) for wid, w in fleet.items()}
    checks = {wid: list(w.worker.wake_checks) for wid, w in fleet.items()}
    assert app.start("quick", 21).result(timeout=20) == 42
    assert first.count("execution_finished") == 1
    # The second checks within about 10 ms; the third does not listen at all.
    wait_until(
        lambda: second.worker.wake_checks[0] > checks["w2"][0],
        10,
        what="w2 to check that the run was taken",
    )
    assert second.worker.wake_checks[1] == checks["w2"][1], "w2 woke for nothing"
    assert third.worker.wake_checks == checks["w3"], "w3 heard the start"
    for wid in ("w2", "w3"):
        assert _claims(fleet[wid]) == before[wid], f"{wid} claimed though the run was taken"
    assert second.count("execution_finished") == third.count("execution_finished") == 0


def test_when_the_first_worker_is_full_the_second_takes_the_run(
    app: perdure.App, fleet: dict[str, BackgroundWorker], release: threading.Event
) -> None:
    first, second, third = fleet.values()
    blocked = app.start("held")
    wait_until(lambda: len(first.worker.running) == 1, 20, what="w1 to hold the blocking run")
    woken = {w: w.worker.wake_checks[1] for w in (second, third)}
    # w1 (concurrency 1) cannot take it: w1 passes the call on, and w2's check
    # finds it left (either way another worker takes it at once, not the idle
    # poll a minute later).
    assert app.start("quick", 5).result(timeout=10) == 10
    takers = [w for w in (second, third) if w.count("execution_finished") == 1]
    assert len(takers) == 1 and first.count("execution_finished") == 0
    assert takers[0].worker.wake_checks[1] > woken[takers[0]]
    release.set()
    assert blocked.result(timeout=20) == "released"


def test_a_worker_is_not_woken_for_a_queue_it_does_not_serve(
    app: perdure.App, fleet: dict[str, BackgroundWorker]
) -> None:
    @app.workflow("elsewhere", queue="other")
    async def elsewhere(ctx: perdure.Context) -> str:
        return "done"

    with BackgroundWorker(app, worker_id="w0", queues=["other"]) as other:
        wait_until(lambda: other.count("heartbeat") > 0, 20, what="w0's first heartbeat")
        wait_until(lambda: other.count("worker_idle") > 0, 20, what="w0 to go idle")
        idle = other.count("worker_idle")
        second = fleet["w2"].worker
        checked = second.wake_checks[0]
        assert app.start("quick", 1).result(timeout=20) == 2
        # By the time the second of the herd checked, w0 would have claimed.
        wait_until(lambda: second.wake_checks[0] > checked, 10, what="w2's check")
        assert other.count("worker_idle") == idle
        assert other.worker.wake_checks == [0, 0]
        # Its own queue still wakes it at once.
        assert app.start("elsewhere").result(timeout=20) == "done"
