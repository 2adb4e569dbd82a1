"""Least privilege: a worker role with row access only runs everything; DDL is refused.

Two roles are created in the test server: an owner that migrates (``perdure
migrate --grant-to``, the real CLI) and a worker role that only gets what the
grants give. A real ``perdure worker --no-migrate`` process runs as the worker
role and completes runs with parallel steps, a map, signals, an event, a child
run, a database step, a limited queue and a graph approval gate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import perdure
from helpers import WorkerProcess
from perdure.store import migrate as migrations
from perdure.store import privileges

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

TESTS = Path(__file__).resolve().parents[1]
DOCS = TESTS.parent / "docs" / "security.md"


@dataclass
class Roles:
    """The two roles of a least-privilege setup and how to connect as each."""

    owner: str
    worker: str
    owner_url: str
    worker_url: str


def create_roles(pg_url: str, schema: str) -> Iterator[Roles]:
    """Create an owner role (may create schemas) and a worker role; drop both after."""
    suffix = uuid.uuid4().hex[:8]
    owner, worker = f"perdure_owner_{suffix}", f"perdure_worker_{suffix}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if not row or not row[0]:
            pytest.skip("the test server's user may not create roles")
        database = sql.Identifier(conn.info.dbname)
        for role in (owner, worker):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(database, sql.Identifier(owner))
        )
    try:
        yield Roles(
            owner,
            worker,
            make_conninfo(pg_url, user=owner),
            make_conninfo(pg_url, user=worker),
        )
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
            for role in (worker, owner):
                ident = sql.Identifier(role)
                conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
                conn.execute(sql.SQL("DROP ROLE {}").format(ident))


@pytest.fixture
def roles(pg_url: str, schema: str) -> Iterator[Roles]:
    """An owner and a worker role on the test server."""
    yield from create_roles(pg_url, schema)


def perdure_cli(url: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``perdure`` command line against ``url``/``schema`` (tests/ on the path)."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "perdure", "--database-url", url, "--schema", schema, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def migrate_as_owner(roles: Roles, schema: str) -> None:
    """``perdure migrate --app ... --grant-to WORKER`` as the owner, through the CLI."""
    done = perdure_cli(
        roles.owner_url,
        schema,
        "migrate",
        "--app",
        "apps.restricted_app:app",
        "--grant-to",
        roles.worker,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"granted worker privileges to role {roles.worker}" in done.stdout


def refused_ddl(worker_url: str, schema: str) -> list[str]:
    """Try DDL and writes to the migration record as the worker role; what was allowed."""
    s = sql.Identifier(schema)
    attempts = [
        sql.SQL("CREATE TABLE {}.intruder (id int)").format(s),
        sql.SQL("DROP TABLE {}.runs").format(s),
        sql.SQL("ALTER TABLE {}.runs ADD COLUMN intruder int").format(s),
        sql.SQL("TRUNCATE {}.history").format(s),
        sql.SQL("CREATE INDEX ON {}.runs (created_at)").format(s),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}.send_signal() RETURNS int AS 'SELECT 1' LANGUAGE sql"
        ).format(s),
        sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (99, 'x')").format(s),
        sql.SQL("DELETE FROM {}.schema_migrations").format(s),
        sql.SQL("DROP SCHEMA {} CASCADE").format(s),
    ]
    allowed = []
    with psycopg.connect(worker_url, autocommit=True) as conn:
        for statement in attempts:
            try:
                conn.execute(statement)
            except psycopg.errors.InsufficientPrivilege:
                continue
            allowed.append(statement.as_string(conn))
    return allowed


def test_a_worker_role_without_ddl_rights_completes_every_kind_of_run(
    roles: Roles, schema: str
) -> None:
    migrate_as_owner(roles, schema)
    assert refused_ddl(roles.worker_url, schema) == []

    worker = WorkerProcess.start(
        "apps.restricted_app:app",
        roles.worker_url,
        schema,
        ["--no-migrate", "--concurrency", "8", "--poll-seconds", "0.2"],
        {},
    )
    try:
        # The starter is restricted too, with automatic migration left on: the
        # schema is current, so it only reads the version and writes no DDL.
        with perdure.App(roles.worker_url, schema=schema) as app:
            runs = [app.start("approval", n) for n in range(4)]
            graph_run = app.start("gated", 10)
            for run in runs:
                app.get_event(run.id, "stage", timeout=60)
            # An update, through the restricted role's request_update and tables.
            assert app.update(runs[0].id, "note", 21, timeout=60) == 42
            for run in runs[:2]:
                app.signal(run.id, "approve", {"by": "app"}, key="approve-1")
            # The SQL function webhooks call, as the restricted role.
            with psycopg.connect(roles.worker_url, autocommit=True) as conn:
                send = sql.SQL("SELECT {}.send_signal(%s, %s, %s::jsonb, %s)").format(
                    sql.Identifier(schema)
                )
                for run in runs[2:]:
                    conn.execute(send, (run.id, "approve", '{"by": "sql"}', "approve-1"))
                conn.execute(send, (graph_run.id, "publish", '"go"', "publish-1"))
            results = [run.result(timeout=60) for run in runs]
            assert graph_run.result(timeout=60) == {"publish": {"value": 11, "signal": "go"}}
        for n, result in enumerate(results):
            assert result["sum"] == 2 * n + 2 * (n + 1) + 12
            assert result["child"] == 2 * n and result["role"] == roles.worker
            assert result["decision"] == {"by": "app" if n < 2 else "sql"}
            assert result["pid"] == worker.pid
        assert "permission denied" not in worker.output()
    finally:
        worker.kill()


def test_a_restricted_role_cannot_migrate_and_is_told_who_can(roles: Roles, schema: str) -> None:
    with pytest.raises(perdure.SchemaError) as refused:
        migrations.migrate(roles.worker_url, schema)
    message = str(refused.value)
    assert f"role {roles.worker!r} may not migrate schema {schema!r}" in message
    assert "perdure migrate` as the schema's owner" in message
    # A worker told not to migrate says the schema is missing, and writes nothing.
    done = perdure_cli(
        roles.worker_url, schema, "worker", "apps.restricted_app:app", "--no-migrate"
    )
    assert done.returncode == 1
    assert f"schema {schema!r} is at version 0" in done.stderr


def test_grants_need_an_existing_role_and_the_owner(roles: Roles, schema: str) -> None:
    migrations.migrate(roles.owner_url, schema)
    with pytest.raises(perdure.ConfigurationError, match="role 'nobody_here' does not exist"):
        privileges.grant_worker(roles.owner_url, schema, "nobody_here")
    with pytest.raises(perdure.SchemaError, match="may not read schema"):
        perdure.App(roles.worker_url, schema=schema, auto_migrate=False).ensure_schema()
    privileges.grant_worker(roles.owner_url, schema, roles.worker)
    privileges.grant_worker(roles.owner_url, schema, roles.worker)  # twice is a no-op
    with pytest.raises(perdure.SchemaError, match="does not own schema"):
        privileges.grant_worker(roles.worker_url, schema, roles.worker)
    assert refused_ddl(roles.worker_url, schema) == []


def test_the_documented_grants_are_the_ones_perdure_runs(schema: str) -> None:
    script = privileges.grant_script("perdure", "perdure_worker")
    assert script in DOCS.read_text(), "docs/security.md must show the current grants"
    done = perdure_cli(
        "postgresql://unused",
        "perdure",
        "migrate",
        "--grant-to",
        "perdure_worker",
        "--print-grants",
    )
    assert done.returncode == 0 and done.stdout == script
