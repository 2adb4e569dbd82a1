"""The audit record is append-only for perdure's roles: one attack per test.

Migration 0019 keeps UPDATE, DELETE and TRUNCATE on ``audit`` from every
role but its owner, and a trigger refuses UPDATE and DELETE from everyone,
the owner included, except retention's ``audit_prune`` run by the owner.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sql_roles import SqlSetup

from perdure.store import migrate as migrations
from perdure.store import privileges

ENTRY = (
    "INSERT INTO {s}.audit (actor, via, source, action, outcome) "
    "VALUES ('alice', 'token', 'api', 'cancel', 'ok')"
)


def one_entry(setup: SqlSetup) -> None:
    setup.call(setup.owner_url, ENTRY)


def entries(setup: SqlSetup) -> list[tuple[object, ...]]:
    return setup.call(setup.owner_url, "SELECT actor, action, outcome FROM {s}.audit ORDER BY id")


@pytest.mark.parametrize("kind", ["worker", "client", "reader"])
@pytest.mark.parametrize(
    "attack",
    [
        "UPDATE {s}.audit SET actor = 'mallory'",
        "DELETE FROM {s}.audit",
        "TRUNCATE {s}.audit",
    ],
)
def test_a_granted_role_cannot_rewrite_the_audit_record(
    sql_setup: SqlSetup, kind: str, attack: str
) -> None:
    one_entry(sql_setup)
    _, url = sql_setup.role(kind)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(url, attack)
    assert entries(sql_setup) == [("alice", "cancel", "ok")]


def test_the_client_role_cannot_forge_an_entry(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(url, ENTRY)
    assert entries(sql_setup) == []


def test_a_worker_appends_but_its_retention_deletes_nothing(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("worker")
    sql_setup.call(url, ENTRY)
    assert sql_setup.call(url, "SELECT {s}.audit_prune(now() + interval '1 day')") == [(None,)]
    assert entries(sql_setup) == [("alice", "cancel", "ok")]


def test_a_worker_setting_the_retention_flag_still_cannot_delete(sql_setup: SqlSetup) -> None:
    one_entry(sql_setup)
    _, url = sql_setup.role("worker")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(
            url,
            "SELECT set_config('perdure.audit_retention', 'on', false); DELETE FROM {s}.audit",
        )
    assert entries(sql_setup) == [("alice", "cancel", "ok")]


@pytest.mark.parametrize(
    "attack", ["UPDATE {s}.audit SET outcome = 'refused'", "DELETE FROM {s}.audit"]
)
def test_even_the_owner_cannot_rewrite_outside_retention(sql_setup: SqlSetup, attack: str) -> None:
    one_entry(sql_setup)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        sql_setup.call(sql_setup.owner_url, attack)
    assert entries(sql_setup) == [("alice", "cancel", "ok")]


def test_retention_run_by_the_owner_deletes_old_entries_only(sql_setup: SqlSetup) -> None:
    one_entry(sql_setup)
    sql_setup.call(
        sql_setup.owner_url,
        "INSERT INTO {s}.audit (at, actor, via, source, action, outcome) "
        "VALUES (now() - interval '40 days', 'bob', 'cli', 'cli', 'retry', 'ok')",
    )
    prune = "SELECT {s}.audit_prune(now() - interval '30 days')"
    deleted = sql_setup.call(sql_setup.owner_url, prune)
    assert deleted == [(1,)]
    assert entries(sql_setup) == [("alice", "cancel", "ok")]


def test_a_worker_granted_before_the_audit_table_gets_no_update_on_it(
    pg_url: str, schema: str
) -> None:
    """Default privileges give a worker UPDATE and DELETE on new tables; 0019 takes them back."""
    role = f"perdure_worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        migrations.migrate(pg_url, schema, upto=18)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for stmt in privileges.grant_statements(schema, role):
                if "audit" not in stmt.as_string(conn):  # the grant of a version-18 schema
                    conn.execute(stmt)
        migrations.migrate(pg_url, schema)
        setup = SqlSetup(pg_url, schema, "", pg_url)
        one_entry(setup)
        url = make_conninfo(pg_url, user=role)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            setup.call(url, "DELETE FROM {s}.audit")
        setup.call(url, ENTRY)
        assert len(entries(setup)) == 2
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
