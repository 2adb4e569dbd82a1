"""Each grant holds its boundary: tested as a role holding it, one attack per test.

The client grant (`perdure migrate --grant-client`) calls the public SQL
functions and nothing else; the reader grant (`--grant-reader`) reads the
tables and nothing else; a role with no grant reaches nothing (EXECUTE is
revoked from PUBLIC on every function).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sql_roles import SqlSetup

from perdure.store import clients, privileges
from perdure.store import migrate as migrations

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"

TABLE_WRITES = [
    "SELECT * FROM {s}.runs",
    "SELECT * FROM {s}.history",
    "SELECT * FROM {s}.schema_migrations",
    "UPDATE {s}.runs SET status = 'completed', output = '\"forged\"'",
    "DELETE FROM {s}.history",
    "INSERT INTO {s}.workflows (name, version, queue) VALUES ('x', 1, 'x')",
]

INTERNAL = [
    "SELECT * FROM {s}.insert_run(gen_random_uuid(), 'w', 1, 'w', NULL, 'null', now())",
    "SELECT * FROM {s}.insert_runs(ARRAY[gen_random_uuid()], 'w', 1, 'w', ARRAY[NULL::text], "
    "ARRAY['null'::jsonb], now())",
    "SELECT {s}.history_partitions_ensure(now(), 1)",
    "SELECT {s}.history_partition_drop(now())",
    "SELECT * FROM {s}.find_run('k')",
    "SELECT {s}.check_text('a', 'b', 1)",
    "SELECT {s}.send_signal('k', 'go', '1', NULL, now())",
    "SELECT * FROM {s}.cancel_runs(ARRAY[gen_random_uuid()], 'x', NULL, now())",
]

WRITING_FUNCTIONS = [
    "SELECT {s}.start_run('w')",
    "SELECT {s}.send_signal('k', 'go')",
    "SELECT {s}.cancel_run('k')",
    "SELECT {s}.pause_run('k')",
    "SELECT {s}.resume_run('k')",
]


def refused(setup: SqlSetup, url: str, query: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        setup.call(url, query)


@pytest.mark.parametrize("query", TABLE_WRITES)
def test_a_client_touches_no_table(sql_setup: SqlSetup, query: str) -> None:
    _, url = sql_setup.role("client")
    refused(sql_setup, url, query)


@pytest.mark.parametrize("query", INTERNAL)
def test_a_client_calls_no_internal_function(sql_setup: SqlSetup, query: str) -> None:
    _, url = sql_setup.role("client")
    refused(sql_setup, url, query)


def test_a_client_starts_signals_reads_and_cancels_runs(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    [(run_id,)] = sql_setup.call(url, "SELECT {s}.start_run('w', '{{\"n\": 1}}', p_key => 'k')")
    assert sql_setup.call(url, "SELECT {s}.send_signal('k', 'go', '1')")[0][0] > 0
    [(status,)] = sql_setup.call(url, "SELECT status FROM {s}.run_status('k')")
    assert status == "queued"
    assert sql_setup.call(url, "SELECT {s}.get_event('k', 'e')") == [(None,)]
    assert sql_setup.call(url, "SELECT * FROM {s}.read_stream('k', 's')") == []
    assert sql_setup.call(url, "SELECT {s}.pause_run('k')") == [("paused",)]
    assert sql_setup.call(url, "SELECT {s}.resume_run('k')") == [("queued",)]
    assert sql_setup.call(url, "SELECT {s}.cancel_run(%s)", str(run_id)) == [("cancelled",)]
    [(stored,)] = sql_setup.call(sql_setup.pg_url, "SELECT status FROM {s}.runs WHERE key = 'k'")
    assert stored == "cancelled"


@pytest.mark.parametrize(
    "query",
    [
        "UPDATE {s}.runs SET status = 'completed'",
        "DELETE FROM {s}.history",
        "INSERT INTO {s}.workflows (name, version, queue) VALUES ('x', 1, 'x')",
        *WRITING_FUNCTIONS,
        *INTERNAL,
    ],
)
def test_a_reader_writes_nothing(sql_setup: SqlSetup, query: str) -> None:
    _, url = sql_setup.role("reader")
    refused(sql_setup, url, query)


def test_a_reader_reads_every_table_even_one_added_later(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("reader")
    sql_setup.call(sql_setup.owner_url, "SELECT {s}.start_run('w', p_key => 'k')")
    assert sql_setup.call(url, "SELECT key FROM {s}.runs") == [("k",)]
    assert sql_setup.call(url, "SELECT count(*) FROM {s}.history") == [(1,)]
    # A table a later migration creates is readable too (default privileges).
    sql_setup.call(sql_setup.owner_url, "CREATE TABLE {s}.later (id int)")
    assert sql_setup.call(url, "SELECT count(*) FROM {s}.later") == [(0,)]


@pytest.mark.parametrize("query", ["SELECT {s}.start_run('w')", "SELECT {s}.get_event('k', 'e')"])
def test_a_role_without_a_grant_executes_nothing(sql_setup: SqlSetup, query: str) -> None:
    role, url = sql_setup.role(None)
    sql_setup.call(sql_setup.owner_url, f"GRANT USAGE ON SCHEMA {{s}} TO {role}")
    refused(sql_setup, url, query)


def test_the_documented_grants_are_the_ones_perdure_runs() -> None:
    text = DOCS.read_text()
    for kind in privileges.KINDS:
        role = f"perdure_{kind}"
        assert privileges.grant_script("perdure", role, kind) in text, kind
    env = dict(os.environ)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perdure",
            "--database-url",
            "postgresql://unused",
            "--schema",
            "perdure",
            "migrate",
            "--grant-client",
            "perdure_client",
            "--grant-reader",
            "perdure_reader",
            "--print-grants",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == privileges.grant_script(
        "perdure", "perdure_client", "client"
    ) + privileges.grant_script("perdure", "perdure_reader", "reader")


def test_perdure_migrate_grants_a_client_and_a_reader(sql_setup: SqlSetup) -> None:
    client, client_url = sql_setup.role(None)
    reader, reader_url = sql_setup.role(None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perdure",
            "--database-url",
            sql_setup.owner_url,
            "--schema",
            sql_setup.schema,
            "migrate",
            "--grant-client",
            client,
            "--grant-reader",
            reader,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"granted client privileges to role {client}" in done.stdout
    assert f"granted reader privileges to role {reader}" in done.stdout
    sql_setup.call(client_url, "SELECT {s}.start_run('w', p_key => 'k')")
    assert sql_setup.call(reader_url, "SELECT key FROM {s}.runs") == [("k",)]
    refused(sql_setup, client_url, "SELECT key FROM {s}.runs")
    refused(sql_setup, reader_url, "SELECT {s}.start_run('w')")


def test_a_worker_granted_before_the_upgrade_keeps_working(pg_url: str, schema: str) -> None:
    # The owner grants at version 16, then migrates to 17, which recreates
    # send_signal and adds the check functions: default privileges cover them.
    suffix = uuid.uuid4().hex[:8]
    owner, worker = f"perdure_owner_{suffix}", f"perdure_worker_{suffix}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for role in (owner, worker):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(conn.info.dbname), sql.Identifier(owner)
            )
        )
    owner_url, worker_url = (make_conninfo(pg_url, user=r) for r in (owner, worker))
    try:
        migrations.migrate(owner_url, schema, upto=16)
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in privileges.grant_statements(schema, worker):
                if ".audit " not in statement.as_string(conn):  # no audit table at 16
                    conn.execute(statement)
        migrations.migrate(owner_url, schema)
        s = sql.Identifier(schema)
        with psycopg.connect(worker_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.workflows (name, version, queue) VALUES ('w', 1, 'w')"
                ).format(s)
            )
            conn.execute(
                sql.SQL(
                    "SELECT * FROM {}.insert_runs(ARRAY[gen_random_uuid()], 'w', 1, 'w', "
                    "ARRAY['k'], ARRAY['{{\"n\": 1}}'::jsonb], now())"
                ).format(s)
            )
            sent = conn.execute(
                sql.SQL("SELECT {}.send_signal('k', 'go', '1', NULL, now())").format(s)
            ).fetchone()
            assert sent is not None and sent[0] > 0
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
            for role in (worker, owner):
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_client_granted_before_the_upgrade_gets_the_functions_it_adds(
    pg_url: str, schema: str
) -> None:
    # The owner grants a client and a reader at version 28; migration 29 adds
    # emit_events. The client may call it after the upgrade, and still touches
    # no table; the reader still executes nothing.
    suffix = uuid.uuid4().hex[:8]
    owner, client, reader = (f"perdure_{kind}_{suffix}" for kind in ("owner", "client", "reader"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for role in (owner, client, reader):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(conn.info.dbname), sql.Identifier(owner)
            )
        )
    owner_url, client_url, reader_url = (
        make_conninfo(pg_url, user=r) for r in (owner, client, reader)
    )
    s = sql.Identifier(schema)
    try:
        migrations.migrate(owner_url, schema, upto=28)
        then = [f for f in clients.PUBLIC_FUNCTIONS if not f.startswith("emit_events(")]
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in clients.client_statements(schema, client, then):
                conn.execute(statement)
            for statement in privileges.reader_statements(schema, reader):
                conn.execute(statement)
        migrations.migrate(owner_url, schema)
        with psycopg.connect(client_url, autocommit=True) as conn:
            emitted = conn.execute(
                sql.SQL("""SELECT {}.emit_events('[{{"name": "paid"}}]')""").format(s)
            ).fetchone()
            assert emitted is not None and len(emitted[0]) == 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT * FROM {}.runs").format(s))
        with psycopg.connect(reader_url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT {}.emit_events('[]')").format(s))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
            for role in (client, reader, owner):
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
