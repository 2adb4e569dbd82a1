"""Invariant 5: starting again with the same key never duplicates a run."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import perdure
from helpers import sent_statements

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers


def test_ten_threads_starting_one_key_make_one_run(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("checkout")
    async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> None:
        return None

    app.ensure_schema()
    barrier = threading.Barrier(10)
    ids: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            ids.append(app.start("checkout", {"order_id": 9182}, key="checkout:9182").id)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(ids) == 10 and len(set(ids)) == 1
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM tasks").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM history WHERE event = 'run_created'").fetchone() == (1,)


def test_ten_apps_in_parallel_connections_make_one_run(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    apps = [make_app() for _ in range(10)]
    for each in apps:

        @each.workflow("report")
        async def report(ctx: perdure.Context) -> None:
            return None

    apps[0].ensure_schema()
    barrier = threading.Barrier(10)
    ids: list[str] = []

    def start(each: perdure.App) -> None:
        barrier.wait()
        ids.append(each.start("report", key="report:2026-11").id)

    threads = [threading.Thread(target=start, args=(each,)) for each in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(set(ids)) == 1 and len(ids) == 10
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_start_inside_the_callers_transaction_is_atomic_with_it(
    app: perdure.App, pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("welcome")
    async def welcome(ctx: perdure.Context, user: dict[str, Any]) -> None:
        return None

    app.ensure_schema()
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")

    # Rolled back: neither the business row nor the run exists.
    with psycopg.connect(pg_url) as conn:
        conn.execute(f"INSERT INTO {schema}.users VALUES (1)")
        handle = app.start("welcome", {"id": 1}, key="welcome:1", conn=conn)
        conn.rollback()
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    with pytest.raises(perdure.RunNotFound):
        app.get_run(handle.id)

    # Committed: both exist.
    with psycopg.connect(pg_url) as conn:
        conn.execute(f"INSERT INTO {schema}.users VALUES (2)")
        handle = app.start("welcome", {"id": 2}, key="welcome:2", conn=conn)
        conn.commit()
    assert app.get_run("welcome:2").id == handle.id
    assert db.execute("SELECT count(*) FROM users").fetchone() == (1,)


def test_an_app_without_the_code_starts_registered_workflows(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    worker_side = make_app()

    @worker_side.workflow("invoice", version=2, queue="billing")
    async def invoice(ctx: perdure.Context, n: int) -> int:
        return n

    trigger_side = make_app()
    with pytest.raises(perdure.UnknownWorkflow):
        trigger_side.start("invoice", 1)
    worker_side.register()
    handle = trigger_side.start("invoice", 1)
    run = handle.get()
    assert (run.workflow, run.version, run.queue) == ("invoice", 2, "billing")


def test_an_app_without_the_code_pins_registered_versions_in_one_statement(
    make_app: Any, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_side = make_app()

    @worker_side.workflow("ledger", version=1, queue="books-v1")
    async def ledger_v1(ctx: perdure.Context, n: int) -> int:
        return n

    @worker_side.workflow("ledger", version=2, queue="books-v2")
    async def ledger_v2(ctx: perdure.Context, n: int) -> int:
        return n

    worker_side.register()
    trigger_side = make_app()
    trigger_side.queues()  # connected and migrated: what follows is the start alone
    with sent_statements(monkeypatch) as sent:
        pinned_handle = trigger_side.start("ledger", 1, version=1, key="ledger:1")
    assert len(sent) == 1 and "INSERT" in sent[0].query.upper(), sent
    with sent_statements(monkeypatch) as sent:
        newest_handle = trigger_side.start("ledger", 2)
    assert len(sent) == 1 and "INSERT" in sent[0].query.upper(), sent
    pinned = pinned_handle.get()
    assert (pinned.version, pinned.queue) == (1, "books-v1")
    newest = newest_handle.get()
    assert (newest.version, newest.queue) == (2, "books-v2")
    again = trigger_side.start("ledger", 1, version=1, key="ledger:1")
    assert again.id == pinned.id and not again.created
    with pytest.raises(perdure.UnknownWorkflow, match="ledger"):
        trigger_side.start("ledger", 3, version=3)
    with pytest.raises(perdure.UnknownWorkflow):
        trigger_side.start("journal", 3)
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    assert db.execute("SELECT count(*) FROM tasks").fetchone() == (2,)
