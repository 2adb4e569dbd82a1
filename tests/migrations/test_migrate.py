"""Migrations: applied in order, once, under a lock; a newer schema is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from perdure.errors import SchemaError
from perdure.store import migrate

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers


def _tables(db: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (schema,),
    ).fetchall()
    return [r[0] for r in rows]


def test_applying_twice_is_a_no_op(pg_url: str, schema: str, db: psycopg.Connection[Any]) -> None:
    first = migrate.migrate(pg_url, schema)
    assert first == [m.version for m in migrate.available()]
    tables = _tables(db, schema)
    assert {"runs", "steps", "tasks", "workers", "workflows", "history"} <= set(tables)
    assert migrate.migrate(pg_url, schema) == []
    assert _tables(db, schema) == tables


def test_two_processes_migrating_at_once_make_one_schema(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    code = (
        "import sys; from perdure.store import migrate; "
        "print(migrate.migrate(sys.argv[1], sys.argv[2]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, pg_url, schema],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    applied = sorted((out.strip() for out, _ in outputs), key=len)
    everything = str([m.version for m in migrate.available()])
    assert applied == ["[]", "[]", everything]
    count = db.execute(f"SELECT count(*) FROM {schema}.schema_migrations").fetchone()
    assert count == (len(migrate.available()),)


def test_a_schema_newer_than_the_code_is_refused(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    migrate.migrate(pg_url, schema)
    db.execute(f"INSERT INTO {schema}.schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(SchemaError, match="newer than this code"):
        migrate.migrate(pg_url, schema)
    with psycopg.connect(pg_url) as conn, pytest.raises(SchemaError, match="upgrade perdure"):
        migrate.ensure_current(conn, schema)


def test_the_code_runs_on_the_next_schema_version_and_no_further(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    migrate.migrate(pg_url, schema)
    ahead = migrate.latest(migrate.available()) + 1
    db.execute(f"INSERT INTO {schema}.schema_migrations (version, name) VALUES ({ahead}, 'next')")
    assert migrate.migrate(pg_url, schema) == []
    with psycopg.connect(pg_url) as conn:
        migrate.ensure_current(conn, schema)
    db.execute(
        f"INSERT INTO {schema}.schema_migrations (version, name) VALUES ({ahead + 1}, 'later')"
    )
    with pytest.raises(SchemaError, match="newer than this code"):
        migrate.migrate(pg_url, schema)


def test_an_unmigrated_schema_is_refused_when_auto_migrate_is_off(pg_url: str, schema: str) -> None:
    import perdure

    app = perdure.App(pg_url, schema=schema, auto_migrate=False)

    @app.workflow("w")
    async def w(ctx: perdure.Context) -> None:
        return None

    try:
        with pytest.raises(SchemaError, match="run `perdure migrate`"):
            app.start("w")
    finally:
        app.close()


def test_upgrading_keeps_a_run_parked_at_a_signal_wakeable(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    assert migrate.migrate(pg_url, schema, upto=2) == [1, 2]
    run_id = "01900000-0000-7000-8000-000000000001"
    db.execute(
        f"INSERT INTO {schema}.runs (id, workflow, version, queue, status, input, created_at, "
        "updated_at, waiting_for) VALUES (%s, 'w', 1, 'w', 'waiting', 'null', now(), now(), "
        """'{"signal": "go"}')""",
        (run_id,),
    )
    db.execute(
        f"INSERT INTO {schema}.tasks (run_id, queue, workflow, version, status, available_at, "
        "created_at) VALUES (%s, 'w', 'w', 1, 'ready', now() + interval '1 year', now())",
        (run_id,),
    )
    later = [m.version for m in migrate.available()][2:]
    assert migrate.migrate(pg_url, schema) == later
    db.execute(f"SELECT {schema}.send_signal(%s, 'go')", (run_id,))
    (due,) = db.execute(
        f"SELECT available_at <= now() FROM {schema}.tasks WHERE run_id = %s", (run_id,)
    ).fetchone()
    assert due, "the signal did not wake a run parked before the upgrade"


def test_upgrading_to_queue_features_keeps_queued_runs_claimable(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """Migration 6 adds columns with defaults: a run queued before it is claimed after it."""
    import perdure

    assert migrate.migrate(pg_url, schema, upto=4) == [1, 2, 3, 4]
    run_id = "01900000-0000-7000-8000-000000000002"
    db.execute(
        f"INSERT INTO {schema}.runs (id, workflow, version, queue, status, input, created_at, "
        "updated_at) VALUES (%s, 'w', 1, 'w', 'queued', '7', now(), now())",
        (run_id,),
    )
    db.execute(
        f"INSERT INTO {schema}.tasks (run_id, queue, workflow, version, priority, status, "
        "available_at, created_at) VALUES (%s, 'w', 'w', 1, 5, 'ready', now(), now())",
        (run_id,),
    )
    db.execute(f"INSERT INTO {schema}.queues VALUES ('w', 1, NULL, now(), now())")
    assert 6 in migrate.migrate(pg_url, schema)
    app = perdure.App(pg_url, schema=schema)

    @app.workflow("w")
    def w(ctx: perdure.SyncContext, n: int) -> int:
        return n + 1

    try:
        assert app.run_until_complete(run_id) == 8
        run = app.get_run(run_id)
        assert (run.priority, run.partition_key, run.tags) == (0, None, None)
        (queue,) = [q for q in app.queues() if q.name == "w"]
        assert (queue.concurrency, queue.rate_limit, queue.rate_per_key) == (1, None, False)
    finally:
        app.close()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["0001_a.sql", "0002_b.sql", "0002_c.sql"], "two migrations are numbered 0002"),
        (["0001_a.sql", "0003_c.sql"], "0002 is missing"),
    ],
)
def test_migration_numbers_are_unique_and_contiguous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: list[str], message: str
) -> None:
    folder = tmp_path / "sql" / "migrations"
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_text("SELECT 1;\n")
    monkeypatch.setattr(migrate.resources, "files", lambda package: tmp_path)
    with pytest.raises(SchemaError, match=message):
        migrate.available()


def test_the_suite_runs_on_the_server_it_names(pg_url: str, request: pytest.FixtureRequest) -> None:
    """The PostgreSQL 15 runs really are on PostgreSQL 15 (unless a URL says otherwise)."""
    server = request.node.callspec.params.get("pg_url", "pg18")
    with psycopg.connect(pg_url) as conn:
        version = migrate.check_server(conn)
        assert version == conn.info.server_version >= migrate.MIN_SERVER_VERSION
    given = "PERDURE_TEST_PG15_URL" if server == "pg15" else "PERDURE_TEST_DATABASE_URL"
    if not os.environ.get(given):
        assert version // 10000 == int(server.removeprefix("pg"))


@pytest.mark.parametrize(
    ("version", "shown"), [(130012, "13.12"), (120000, "12.0"), (90624, "9.6.24")]
)
def test_servers_older_than_14_are_refused_with_their_version(version: int, shown: str) -> None:
    with pytest.raises(SchemaError) as refused:
        migrate.check_version(version)
    assert str(refused.value) == (
        f"PostgreSQL {shown} is not supported: perdure needs PostgreSQL 14 or newer "
        "(supported: 14 to 18); upgrade the server"
    )
    assert migrate.check_version(140000) == 140000
    assert migrate.check_version(190000) == 190000  # newer servers are not refused
