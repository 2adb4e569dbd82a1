"""A database that goes away mid-execution is not a failure of the run.

The store turns a lost or refused connection into the engine's
``Disconnected``; the worker hands the task back once the database answers,
and no attempt of the step or the workflow is counted. Heartbeats hold only
the tasks a worker still executes, so a task it gave up on lapses; a task
claimed while the claim's answer was lost is given back, without a lapse, as
soon as the worker's connection is back.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.store import outage_log
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
    taken = execute_sync(db, app.statements.tasks.heartbeat("w", [executing], 3600))
    assert taken == set()
    leases = dict(db.execute("SELECT id, lease_expires_at - now() FROM tasks").fetchall())
    assert leases[executing] > timedelta(minutes=59)
    assert leases[given_up] < timedelta(seconds=2), "a task the worker gave up on must lapse"
    # Taken by another worker: reported. Ended (its row gone): not reported.
    db.execute("UPDATE tasks SET worker_id = 'other' WHERE id = %s", (given_up,))
    db.execute("DELETE FROM tasks WHERE id = %s", (executing,))
    beat = app.statements.tasks.heartbeat("w", [executing, given_up], 3600)
    assert execute_sync(db, beat) == {given_up}


class Cutter:
    """Terminates every backend of one worker, at once and then again and again.

    The connections really die (pg_terminate_backend, by application_name):
    the worker's next statement on each fails, and so do the ones on the
    connections its pools open while the cutter runs.
    """

    def __init__(self, url: str, worker_id: str) -> None:
        self.prefix = f"perdure-worker-{worker_id}%"
        self.conn = psycopg.connect(url, autocommit=True)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.terminated = 0
        self.thread = threading.Thread(target=self._sweep, daemon=True)

    def cut(self) -> None:
        """Terminate the worker's backends now, then keep doing it until :meth:`close`."""
        self._terminate()
        if not self.thread.is_alive():
            self.thread.start()

    def _terminate(self) -> None:
        with self.lock:
            found = self.conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name LIKE %s",
                [self.prefix],
            ).fetchone()
            self.terminated += int(found[0]) if found else 0

    def _sweep(self) -> None:
        while not self.stop.wait(0.005):
            self._terminate()

    def close(self) -> None:
        """Stop cutting; close the cutter's connection."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(10)
        self.conn.close()


def test_a_lost_database_mid_step_hands_the_task_back_without_a_failure(
    app: perdure.App, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    cutter = Cutter(pg_url, "cut")

    def cut_off() -> int:
        calls.append("a")
        if len(calls) == 1:
            cutter.cut()  # the step returns; its checkpoint finds no database
        return 1

    @app.workflow("pair")
    async def pair(ctx: perdure.Context) -> list[int]:
        try:
            a = await ctx.step("a", cut_off)
        except Exception:  # user code cannot swallow the engine's signal
            a = -1
        b = await ctx.step("b", lambda: calls.append("b") or 2)
        return [a, b]

    handle = app.start("pair")
    try:
        with BackgroundWorker(app, worker_id="cut", **FAST):
            wait_until(
                lambda: any("lost the database" in r.getMessage() for r in caplog.records),
                what="the execution to lose the database",
            )
            cutter.close()
            assert handle.result(timeout=30) == [1, 2]
    finally:
        cutter.close()
    assert cutter.terminated > 0
    # The step whose checkpoint was lost ran again, but neither a step nor the
    # workflow counted a failed attempt.
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


def test_a_claim_whose_answer_was_lost_is_given_back_without_a_lapse(
    app: perdure.App,
    db: psycopg.Connection[Any],
    pg_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every warning passes here: the test waits for the claim loop's own.
    monkeypatch.setattr(outage_log, "INTERVAL_SECONDS", 0.0)
    caplog.set_level(logging.INFO, logger="perdure.worker")

    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> str:
        return "done"

    app.ensure_schema()
    lost, other = app.start("noop"), app.start("noop")
    # The claim committed and its answer was lost: the task is the worker's,
    # for an hour, and the worker does not know it.
    claim = app.statements.tasks.claim(
        worker_id="lost", queues=["noop"], names=["noop"], versions=[1], limit=1, lease_seconds=3600
    )
    assert [t.run_id for t in execute_sync(db, claim)] == [lost.id]
    # Another worker's claim is not this worker's to give back.
    theirs = app.statements.tasks.claim(
        worker_id="else", queues=["noop"], names=["noop"], versions=[1], limit=1, lease_seconds=3600
    )
    assert [t.run_id for t in execute_sync(db, theirs)] == [other.id]
    cutter = Cutter(pg_url, "lost")
    try:
        with BackgroundWorker(
            app,
            worker_id="lost",
            concurrency=2,
            poll_seconds=0.05,
            idle_poll_seconds=0.05,
            lease_seconds=3600,
        ) as worker:
            wait_until(lambda: worker.count("worker_started"), what="the worker to start")
            cutter.cut()
            wait_until(
                lambda: any("(claim failed" in r.getMessage() for r in caplog.records),
                what="a claim to fail",
            )
            cutter.close()
            # Well within its hour-long lease.
            assert lost.result(timeout=30) == "done"
    finally:
        cutter.close()
    history = app.history(lost.id)
    events = [e.event for e in history]
    assert "lease_expired" not in events, events
    released = [e.detail.get("reason") for e in history if e.event == "run_released"]
    assert released == ["claim answer lost"]
    assert any("gave back 1 task(s)" in r.getMessage() for r in caplog.records)
    # The other worker's claim is left alone.
    found = db.execute(
        "SELECT worker_id, lapses, failures FROM tasks WHERE run_id = %s", (other.id,)
    ).fetchone()
    assert found == ("else", 0, 0)


def test_in_a_transaction_step_a_conflict_is_the_databases_and_a_constraint_the_users(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    db.execute("CREATE TABLE ledger (id int PRIMARY KEY)")
    db.execute("INSERT INTO ledger VALUES (1)")
    tries: list[str] = []

    def conflicted(conn: psycopg.Connection[Any]) -> int:
        tries.append("conflicted")
        if len(tries) == 1:  # the server gives up the first transaction
            conn.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access'"
                " USING ERRCODE = '40001'; END $$"
            )
        conn.execute(f"INSERT INTO {schema}.ledger VALUES (2)")
        return 2

    def duplicate(conn: psycopg.Connection[Any]) -> int:
        tries.append("duplicate")
        conn.execute(f"INSERT INTO {schema}.ledger VALUES (1)")  # the user's own mistake
        return 1

    once = perdure.RetryPolicy(max_attempts=1)

    @app.workflow("pair")
    async def pair(ctx: perdure.Context) -> int:
        await ctx.transaction("conflicted", conflicted, retry=once)
        return await ctx.transaction("duplicate", duplicate, retry=once)  # type: ignore[no-any-return]

    handle = app.start("pair")
    with BackgroundWorker(app, **FAST), pytest.raises(perdure.RunFailed, match="UniqueViolation"):
        handle.result(timeout=30)
    # The serialization failure cost no attempt: its one attempt completed the
    # step. The unique violation failed its step for good, at its one attempt.
    assert tries == ["conflicted", "conflicted", "duplicate"]
    steps = {s.name: (s.status, s.attempts) for s in app.steps(handle.id)}
    assert steps == {"conflicted": ("completed", 1), "duplicate": ("failed", 1)}
    released = [e.detail.get("reason") for e in app.history(handle.id) if e.event == "run_released"]
    assert released == ["database fault: 40001"]
    assert db.execute("SELECT array_agg(id ORDER BY id) FROM ledger").fetchone() == ([1, 2],)
