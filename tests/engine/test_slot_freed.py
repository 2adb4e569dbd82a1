"""A slot freed in a queue limited across workers wakes the other workers at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

import perdure
from helpers import BackgroundWorker, wait_until

#: Far longer than the test waits: only a notification can wake the idle worker.
SLOW_POLL = {"poll_seconds": 120.0, "concurrency": 2}


def test_a_task_finishing_on_one_worker_wakes_another_that_waits_for_the_slot(
    make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]
) -> None:
    go = threading.Event()
    first_app, second_app = make_app(), make_app()
    for app in (first_app, second_app):
        app.queue("narrow", concurrency=1)

    @first_app.workflow("first", queue="narrow")
    def first(ctx: perdure.SyncContext) -> str:
        return str(ctx.step("hold", lambda: "held" if go.wait(60) else "timed out"))

    @second_app.workflow("second", queue="narrow")
    def second(ctx: perdure.SyncContext) -> str:
        return "second"

    with (
        BackgroundWorker(first_app, worker_id="holder", **SLOW_POLL) as holder,
        BackgroundWorker(second_app, worker_id="waiter", **SLOW_POLL) as waiter,
    ):
        wait_until(lambda: len(first_app.workers()) == 2, what="both workers registered")
        held = first_app.start("first")
        wait_until(lambda: holder.worker.running, what="the holder took the slot")
        idle = waiter.count("worker_idle")
        queued = second_app.start("second")
        # The waiter was woken by the start but the slot is taken: it went idle.
        wait_until(lambda: waiter.count("worker_idle") > idle, what="the waiter idle")
        assert second_app.get_run(queued.id).status == perdure.RunStatus.QUEUED
        go.set()
        assert held.result(timeout=30) == "held"
        # Well within the waiter's 120 s poll: woken by the slot's notification.
        assert queued.result(timeout=30) == "second"
