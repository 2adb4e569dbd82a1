"""A database that goes away mid-execution is not a failure of the run.

The store turns a lost or refused connection into the engine's
``Disconnected``; the worker hands the task back once the database answers,
and no attempt of the step or the workflow is counted. Heartbeats hold only
the tasks a worker still executes, so a task it gave up on lapses.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker
from perdure.engine import faults
from perdure.engine.control import Disconnected
from perdure.store.store import execute_sync

FAST = {"concurrency": 2, "poll_seconds": 0.05, "lease_seconds": 5}


def test_heartbeats_extend_only_the_tasks_a_worker_executes(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> None:
        return None

    app.ensure_schema()
    app.start("noop")
    app.start("noop")
    claim = app.statements.tasks.claim(
        worker_id="w", queues=["noop"], names=["noop"], versions=[1], limit=2, lease_seconds=1
    )
    executing, given_up = (t.fence.task_id for t in execute_sync(db, claim))
    held = execute_sync(db, app.statements.tasks.heartbeat("w", [executing], 3600))
    assert held == {executing}
    leases = dict(db.execute("SELECT id, lease_expires_at - now() FROM tasks").fetchall())
    assert leases[executing] > timedelta(minutes=59)
    assert leases[given_up] < timedelta(seconds=2), "a task the worker gave up on must lapse"


def test_a_lost_database_mid_step_hands_the_task_back_without_a_failure(
    app: perdure.App,
) -> None:
    calls: list[str] = []

    @app.workflow("pair")
    async def pair(ctx: perdure.Context) -> list[int]:
        try:
            a = await ctx.step("a", lambda: calls.append("a") or 1)
        except Exception:  # user code cannot swallow the engine's signal
            a = -1
        b = await ctx.step("b", lambda: calls.append("b") or 2)
        return [a, b]

    handle = app.start("pair")
    fault = faults.Fault("a", "before_checkpoint", error=Disconnected("connection lost"))
    faults.install(fault)
    try:
        with BackgroundWorker(app, **FAST):
            assert handle.result(timeout=30) == [1, 2]
    finally:
        faults.remove(fault)
    # The step ran again (its checkpoint was never written), but neither the
    # step nor the workflow counted a failed attempt.
    assert calls == ["a", "a", "b"]
    assert [(s.name, s.attempts) for s in app.steps(handle.id)] == [("a", 1), ("b", 1)]
    history = app.history(handle.id)
    events = [e.event for e in history]
    assert "step_retry_scheduled" not in events and "run_retry_scheduled" not in events
    released = [e for e in history if e.event == "run_released"]
    assert [e.detail.get("reason") for e in released] == ["database unreachable"]


@pytest.mark.parametrize("shape", ["def", "async def"])
def test_a_transaction_step_whose_connection_dies_commits_once_and_counts_no_failure(
    app: perdure.App, db: psycopg.Connection[Any], schema: str, shape: str
) -> None:
    db.execute("CREATE TABLE effects (run_id uuid)")
    effects: list[str] = []
    insert = f"INSERT INTO {schema}.effects (run_id) VALUES (%s)"

    def record(conn: psycopg.Connection[Any], run_id: str) -> int:
        conn.execute(insert, (run_id,))
        effects.append(run_id)
        if len(effects) == 1:  # the first attempt loses its connection mid-transaction
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return len(effects)

    async def record_async(conn: psycopg.AsyncConnection[Any], run_id: str) -> int:
        await conn.execute(insert, (run_id,))
        effects.append(run_id)
        if len(effects) == 1:
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return len(effects)

    fn = record if shape == "def" else record_async

    @app.workflow("tx")
    async def tx(ctx: perdure.Context) -> int:
        return await ctx.transaction("record", fn, ctx.run_id)  # type: ignore[no-any-return]

    handle = app.start("tx")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == 2
    # The first transaction died with its connection and rolled back.
    assert db.execute("SELECT count(*) FROM effects").fetchone() == (1,)
    assert [(s.name, s.attempts) for s in app.steps(handle.id)] == [("record", 1)]
