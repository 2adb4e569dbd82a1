"""The worker's "next wake-up": the next timed wait, never a run parked until an event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.engine.housekeeping import Status


def test_a_run_parked_at_a_child_waits_without_a_wake_up(app: perdure.App) -> None:
    @app.workflow(name="child")
    def child(ctx: perdure.SyncContext) -> str:
        return "grown"

    @app.workflow(name="parent")
    def parent(ctx: perdure.SyncContext) -> str:
        return str(ctx.start_child("child").result())

    @app.workflow(name="sleeper")
    def sleeper(ctx: perdure.SyncContext) -> None:
        ctx.sleep(3600)

    parked = app.start("parent")
    # No worker serves the child's queue: the parent stays parked at it.
    with BackgroundWorker(app, queues=["parent"]) as worker:
        wait_until(lambda: app.get_run(parked.id).status == "waiting", what="the parent parked")
    with BackgroundWorker(app, queues=["parent", "sleeper"]) as worker:
        wait_until(lambda: _status(worker).waiting == 1, what="the parked run counted")
        assert _status(worker).next_wake is None
    sleeping = app.start("sleeper")
    with BackgroundWorker(app, queues=["parent", "sleeper"]) as worker:
        wait_until(lambda: app.get_run(sleeping.id).status == "waiting", what="the sleeper slept")
    with BackgroundWorker(app, queues=["parent", "sleeper"]) as worker:
        wait_until(lambda: _status(worker).waiting == 2, what="both waiting runs counted")
        wake = _status(worker).next_wake
        assert wake is not None
        assert abs(wake - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=5)


def _status(worker: BackgroundWorker) -> Status:
    """The worker's status job (it reports the runs waiting and the next wake-up)."""
    wait_until(lambda: worker.worker.status is not None, what="the status job started")
    status = worker.worker.status
    assert status is not None
    return status
