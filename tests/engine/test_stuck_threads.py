"""A ``def`` step past its timeout keeps its thread; the worker counts it and stops
claiming work it has no slot for (engine/threads.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.observability.metrics import WorkerMetrics

LOCAL = "http://127.0.0.1"
#: What the stuck steps wait for: set at the end of the test to let them return.
release = threading.Event()


def block() -> str:
    release.wait(60)
    return "late"


def define(app: perdure.App) -> None:
    @app.workflow(name="hang")
    def hang(ctx: perdure.SyncContext) -> str:
        try:
            return str(
                ctx.step("block", block, timeout=0.2, retry=perdure.RetryPolicy(max_attempts=1))
            )
        except perdure.StepFailed as failed:
            return failed.error_type

    @app.workflow(name="quick")
    def quick(ctx: perdure.SyncContext) -> str:
        return "done"


def claimed_by(db: psycopg.Connection[tuple[object, ...]], run_id: str) -> set[object]:
    """The workers that claimed ``run_id``, from its history."""
    found = db.execute(
        "SELECT DISTINCT worker_id FROM history WHERE run_id = %s AND event = 'run_claimed'",
        [run_id],
    ).fetchall()
    return {row[0] for row in found}


def test_a_worker_whose_threads_are_stuck_claims_nothing_until_they_return(
    make_app: Callable[..., perdure.App], db: psycopg.Connection[tuple[object, ...]]
) -> None:
    app = make_app()
    define(app)
    release.clear()
    try:
        metrics = WorkerMetrics()
        with BackgroundWorker(
            app, concurrency=2, poll_seconds=0.1, worker_id="full", observers=[metrics]
        ) as full:
            hung = [app.start("hang") for _ in range(2)]
            assert [h.result(timeout=30) for h in hung] == ["perdure.errors.StepTimeout"] * 2
            wait_until(lambda: full.worker.stuck_threads == 2, what="two stuck threads")
            assert db.execute("SELECT stuck_threads FROM workers WHERE id = 'full'").fetchone() == (
                2,
            )

            # Both slots are held by stuck threads: a new run waits for another worker.
            attendance = full.worker.attendance
            seen, fulls = attendance.heard_full, full.count("worker_full")
            waiting = app.start("quick")
            wait_until(lambda: attendance.heard_full > seen, what="the full worker heard of it")
            assert app.get_run(waiting.id).status == "queued"
            # Told and full, its claim loop waits for a slot: it does not spin.
            assert full.count("worker_full") <= fulls + 2
            with BackgroundWorker(app, concurrency=1, poll_seconds=0.1, worker_id="spare"):
                assert waiting.result(timeout=30) == "done"
            assert claimed_by(db, waiting.id) == {"spare"}

            # Once the stuck functions return, their slots are free again.
            release.set()
            wait_until(lambda: full.worker.stuck_threads == 0, what="the threads came back")
            again = app.start("quick")
            assert again.result(timeout=30) == "done"
            assert claimed_by(db, again.id) == {"full"}
            assert full.count("thread_stuck") == 2 and full.count("thread_freed") == 2
        assert db.execute("SELECT count(*) FROM steps WHERE name = 'block'").fetchone() == (2,)
    finally:
        release.set()
