"""`perdure migrate --plan`'s reading of migrations: statements, the locks they take, workers.

The split into statements keeps quoted text and function bodies whole; each
kind of DDL is quoted with the lock PostgreSQL takes for it; a plan of a new
schema lists every shipped migration, and one of a current schema lists the
live workers and whether their code runs on it.
"""

from __future__ import annotations

from typing import Any

import psycopg

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.store import migrate, migration_plan
from perdure.store.migration_plan import locks_of, statements


def test_statements_keep_quotes_and_function_bodies_whole_and_drop_comments() -> None:
    text = (
        "-- a comment; not a statement\n"
        "CREATE TABLE t (x text DEFAULT 'a;b');\n"
        "CREATE FUNCTION f() RETURNS trigger AS $body$ BEGIN PERFORM 1; "
        "RETURN $q$x;y$q$; END $body$ LANGUAGE plpgsql;\n"
        ";\n"
        "SELECT 'unterminated; still one statement -- ends the file"
    )
    assert statements(text) == [
        "CREATE TABLE t (x text DEFAULT 'a;b')",
        "CREATE FUNCTION f() RETURNS trigger AS $body$ BEGIN PERFORM 1; "
        "RETURN $q$x;y$q$; END $body$ LANGUAGE plpgsql",
        "SELECT 'unterminated; still one statement -- ends the file",
    ]
    assert statements("SELECT 1 -- a last comment without a newline") == ["SELECT 1"]


def test_each_kind_of_statement_is_quoted_with_its_lock() -> None:
    rows = {"tasks": 2_000_000.0}
    expected = {
        "CREATE INDEX CONCURRENTLY i ON tasks (x)": ("SHARE UPDATE EXCLUSIVE", 10.0),
        "CREATE UNIQUE INDEX i ON tasks (x)": ("SHARE", 10.0),
        "ALTER TABLE tasks ADD COLUMN x text": ("ACCESS EXCLUSIVE", 0.0),
        "ALTER TABLE tasks ADD COLUMN x text, ALTER COLUMN y SET DEFAULT 1": (
            "ACCESS EXCLUSIVE",
            0.0,
        ),
        "ALTER TABLE tasks ALTER COLUMN y TYPE bigint": ("ACCESS EXCLUSIVE", 10.0),
        "CREATE TRIGGER t AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION f()": (
            "SHARE ROW EXCLUSIVE",
            0.0,
        ),
        "DROP INDEX IF EXISTS tasks_x": ("ACCESS EXCLUSIVE", 0.0),
        "UPDATE tasks SET x = 1": ("ROW EXCLUSIVE", 10.0),
    }
    for statement, (mode, seconds) in expected.items():
        (lock,) = locks_of(statement, rows)
        assert (lock.mode, lock.seconds) == (mode, seconds), statement
    assert locks_of("SELECT 1", rows) == []
    long = "UPDATE tasks SET x = " + "1" * 100
    assert locks_of(long, rows)[0].statement.endswith("...")


def test_a_new_schema_plans_every_migration_and_has_no_workers(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    found = migration_plan.plan(db, schema)
    shipped = migrate.available()
    assert (found.current, found.target) == (0, migrate.latest(shipped))
    assert [m.version for m in found.migrations] == [m.version for m in shipped]
    assert any(m.locks for m in found.migrations)
    assert found.workers == []


def test_a_current_schema_lists_the_live_workers_that_run_on_it(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> None:
        return None

    with BackgroundWorker(app, worker_id="planned", poll_seconds=0.05) as worker:
        wait_until(lambda: worker.count("worker_started"), what="the worker to start")
        found = migration_plan.plan(db, schema)
    assert found.migrations == []
    assert [(w.id, w.compatible) for w in found.workers] == [("planned", True)]


def test_workers_of_a_release_that_did_not_record_versions_are_listed_unknown(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    # Before migration 0012 the workers table had no schema_version column.
    migrate.migrate(pg_url, schema, upto=11)
    found = migration_plan.plan(db, schema)
    assert found.current == 11
    assert found.migrations[0].version == 12
    assert found.workers == []
