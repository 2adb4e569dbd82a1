"""The archive tables mirror the live ones, and history is partitioned by day."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure

pytestmark = pytest.mark.all_servers

MIRRORED = ("runs", "steps", "history", "signals", "events", "streams")


def columns(db: psycopg.Connection[Any], schema: str, table: str) -> list[tuple[str, str]]:
    rows = db.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [(str(name), str(kind)) for name, kind in rows]


def test_each_archive_table_has_its_live_tables_columns_in_order(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    """A migration that adds a column to a live table must add it to its archive table too:
    `perdure prune --archive` copies rows with SELECT *."""
    app.ensure_schema()
    for table in MIRRORED:
        live = columns(db, schema, table)
        assert live, table
        assert columns(db, schema, f"archive_{table}") == live, table


def test_history_is_partitioned_by_day_with_a_default_partition(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    app.ensure_schema()
    (strategy,) = db.execute(
        "SELECT partstrat FROM pg_partitioned_table WHERE partrelid = 'history'::regclass"
    ).fetchone()  # type: ignore[misc]
    assert strategy == "r"
    parts = db.execute("SELECT name, from_at, to_at, is_default FROM history_partitions()")
    found = parts.fetchall()
    assert found[-1][0] == "history_default" and found[-1][3]
    days = [(to - start).total_seconds() for _, start, to, default in found if not default]
    assert days and set(days) == {86400.0}
    # The primary key holds the partition key.
    (key,) = db.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'history'::regclass AND contype = 'p'"
    ).fetchone()  # type: ignore[misc]
    assert key == "PRIMARY KEY (id, at)"
