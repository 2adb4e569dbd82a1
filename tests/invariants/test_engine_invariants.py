"""Invariants 1, 7, 8 and 9: atomic progress, graceful hand-back, the claim index, wake-ups."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers


def test_a_checkpoint_whose_history_row_fails_writes_nothing(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    calls: list[str] = []

    @app.workflow("pair")
    async def pair(ctx: perdure.Context) -> list[int]:
        a = await ctx.step("a", lambda: calls.append("a") or 1)
        b = await ctx.step("b", lambda: calls.append("b") or 2)
        return [a, b]

    app.ensure_schema()
    # A sequence counts the refused checkpoints: nextval survives the rollback.
    db.execute("CREATE SEQUENCE refused_checkpoints")
    db.execute(
        "CREATE FUNCTION refuse_history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.event = 'step_completed' THEN PERFORM nextval('{schema}.refused_checkpoints'); "
        "RAISE EXCEPTION 'history is down'; END IF; "
        "RETURN NEW; END $$"
    )
    db.execute(
        "CREATE TRIGGER refuse_history BEFORE INSERT ON history "
        "FOR EACH ROW EXECUTE FUNCTION refuse_history()"
    )
    handle = app.start("pair")
    with BackgroundWorker(app, concurrency=1, lease_seconds=1, poll_seconds=0.05):
        wait_until(
            lambda: db.execute("SELECT is_called FROM refused_checkpoints").fetchone() == (True,),
            20,
            what="step a's checkpoint to be sent and refused",
        )
        assert "a" in calls
        # The step ran, but its checkpoint statement failed as a whole: no
        # step row, no history row, and the task still belongs to the worker.
        assert db.execute("SELECT count(*) FROM steps").fetchone() == (0,)
        assert db.execute(
            "SELECT count(*) FROM history WHERE event = 'step_completed'"
        ).fetchone() == (0,)
        # The worker's maintenance may be adding a history partition (it
        # clones the table's triggers): should PostgreSQL pick this DROP as
        # the victim of that deadlock, drop it again.
        for _ in range(10):
            try:
                db.execute("DROP TRIGGER refuse_history ON history")
                break
            except psycopg.errors.DeadlockDetected:
                continue
        else:
            raise AssertionError("the trigger could not be dropped")
        assert handle.result(timeout=30) == [1, 2]
    # Step a ran again after the lease lapsed: its first checkpoint never committed.
    assert calls.count("a") >= 2 and calls.count("b") == 1
    assert [(s.name, s.attempts) for s in app.steps(handle.id)] == [("a", 1), ("b", 1)]


def test_the_claim_uses_the_partial_index_of_ready_tasks(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> None:
        return None

    app.ensure_schema()
    # Many held tasks and a few ready ones: the claim must not scan the held.
    db.execute(
        "INSERT INTO runs (id, workflow, version, queue, status, input, created_at, updated_at) "
        "SELECT gen_random_uuid(), 'noop', 1, 'noop', 'running', 'null', now(), now() "
        "FROM generate_series(1, 20000)"
    )
    db.execute(
        "INSERT INTO tasks (run_id, queue, workflow, version, status, available_at, created_at,"
        " worker_id, lease_expires_at) "
        "SELECT id, 'noop', 'noop', 1, CASE WHEN random() < 0.001 THEN 'ready' ELSE 'claimed' END,"
        " now(), now(), 'w', now() + interval '1 hour' FROM runs"
    )
    db.execute("ANALYZE tasks")
    stmt = app.statements.tasks.claim(
        worker_id="w2", queues=["noop"], names=["noop"], versions=[1], limit=10, lease_seconds=30
    )
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + stmt.query, stmt.params).fetchall())
    assert "tasks_ready_idx" in plan, plan


def test_an_idle_worker_is_woken_by_notify_not_by_polling(app: perdure.App) -> None:
    @app.workflow("ping")
    async def ping(ctx: perdure.Context) -> str:
        return "pong"

    app.ensure_schema()
    with BackgroundWorker(app, concurrency=1, poll_seconds=3600) as worker:
        wait_until(lambda: worker.count("worker_idle") >= 1, 20, what="the worker to go idle")
        # Polling would take an hour; the NOTIFY of the new task wakes it.
        assert app.start("ping").result(timeout=60) == "pong"


def test_sigterm_hands_in_flight_work_back_for_another_worker(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    db.execute("CREATE TABLE tx_ledger (run_id uuid, pid int)")
    first = spawn_worker("apps.crash_app:app", "--concurrency", "1", "--shutdown-seconds", "0.5")
    wait_until(lambda: any(w.name == "crashy" for w in app.workflows()), 30, what="registration")
    handle = app.start("crashy", {"slow": 30})
    wait_until(
        lambda: db.execute("SELECT count(*) FROM ledger WHERE step = 'slow'").fetchone() == (1,),
        30,
        what="the slow step to start",
    )
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=20) == 0
    assert handle.status() == perdure.RunStatus.QUEUED
    assert "run_released" in [e.event for e in app.history(handle.id)]
    db.execute("UPDATE runs SET input = '{\"slow\": 0}'")
    spawn_worker("apps.crash_app:app", "--concurrency", "1")
    output = handle.result(timeout=30)
    assert output["first"] == first.pid
    counts = dict(
        db.execute("SELECT step, count(*) FROM ledger GROUP BY step").fetchall()  # type: ignore[arg-type]
    )
    assert counts == {"first": 1, "slow": 2, "last": 1}
