"""Migration 0009 turns history into a partitioned table and keeps every row."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from perdure.store import migrate

pytestmark = pytest.mark.all_servers

RUN = "01900000-0000-7000-8000-0000000000aa"
GONE = "01900000-0000-7000-8000-0000000000bb"


def test_existing_history_stays_readable_and_its_partition_drops_whole(
    pg_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    assert migrate.migrate(pg_url, schema, upto=8) == [1, 2, 3, 4, 5, 6, 7, 8]
    db.execute(
        "INSERT INTO runs (id, workflow, version, queue, status, input, created_at, updated_at) "
        "VALUES (%s, 'w', 1, 'w', 'completed', 'null', now() - interval '40 days', now())",
        (RUN,),
    )
    for run_id, event, days in [
        (RUN, "run_created", 40),
        (GONE, "run_created", 39),
        (RUN, "run_claimed", 39),
        (RUN, "run_completed", 0),
    ]:
        db.execute(
            "INSERT INTO history (run_id, at, event) "
            "VALUES (%s, now() - make_interval(days => %s), %s)",
            (run_id, days, event),
        )
    before = db.execute("SELECT id, run_id, at, event FROM history ORDER BY id").fetchall()

    assert migrate.migrate(pg_url, schema)[0] == 9
    after = db.execute("SELECT id, run_id, at, event FROM history ORDER BY id").fetchall()
    assert after == before
    parts = db.execute("SELECT name, from_at FROM history_partitions() WHERE NOT is_default")
    names = dict(parts.fetchall())
    assert "history_legacy" in names and names["history_legacy"] is None

    with perdure.App(pg_url, schema=schema) as app:
        events = app.history(RUN)
        assert [e.event for e in events] == ["run_created", "run_claimed", "run_completed"]

        @app.workflow("w2")
        def w2(ctx: perdure.SyncContext) -> None:
            return None

        new = app.start("w2")
        (new_event,) = app.history(new.id)
        # Ids go on after the old ones, so id order stays time order.
        assert new_event.id > max(row[0] for row in before)

    # Dropping the old partition keeps the rows of runs still kept (moved to
    # the default partition) and lets the others go with it.
    (dropped,) = db.execute("SELECT history_partition_drop(now() + interval '2 days')").fetchone()  # type: ignore[misc]
    assert dropped == "history_legacy"
    kept = db.execute(
        "SELECT event, tableoid::regclass::text FROM history WHERE run_id = %s ORDER BY id", (RUN,)
    ).fetchall()
    assert [e for e, _ in kept] == ["run_created", "run_claimed", "run_completed"]
    assert {where for _, where in kept} == {"history_default"}
    assert db.execute("SELECT count(*) FROM history WHERE run_id = %s", (GONE,)).fetchone() == (0,)
