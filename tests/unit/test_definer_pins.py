"""Every SECURITY DEFINER function pins its search_path in the migrations themselves.

The migrations are read as files, with no database (``migration_reading``):
a definer passes when its latest definition sets a search_path ending in
pg_temp, or a later ``ALTER FUNCTION`` in a migration does. The migrator's
pin after each migration does not count: an auditor reads the SQL.
"""

from __future__ import annotations

import pytest

from migration_reading import Schema, migrations, unpinned
from perdure.store.migrate import PINNED_FROM


def test_every_security_definer_pins_its_search_path_in_the_migrations() -> None:
    found = unpinned(migrations())
    assert found == [], (
        "SECURITY DEFINER functions whose latest definition pins no search_path ending in "
        "pg_temp (pin them in a new migration with ALTER FUNCTION ... SET search_path = "
        "pg_catalog, <schema>, pg_temp): " + "; ".join(found)
    )


def test_the_reading_finds_the_public_definers() -> None:
    schema = Schema()
    for name, text in migrations():
        schema.read(text, name)
    definers = {key for key, f in schema.functions.items() if f.definer}
    assert {
        "send_signal(text, text, jsonb, text)",
        "start_run(text, jsonb, text, integer, interval, integer, jsonb, text, text, interval)",
        "run_status(text)",
        "get_event(text, text)",
        "read_stream(text, text, integer, integer)",
        "cancel_run(text, text)",
        "pause_run(text)",
        "resume_run(text)",
        "emit_event(text, jsonb, text)",
        "history_partitions_ensure(timestamp with time zone, integer)",
        "history_partition_drop(timestamp with time zone)",
        "send_update(text, text, jsonb, text)",
        "update_reply(text, text, double precision)",
    } <= definers
    # The internal form of send_signal runs as its caller.
    assert not schema.functions[
        "send_signal(text, text, jsonb, text, timestamp with time zone)"
    ].definer


CASES = [
    # Pinned in its own CREATE, from the migrator's path or with pg_temp last.
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER SET search_path FROM CURRENT "
        "AS $$ SELECT 1 $$",
        [],
    ),
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER "
        "SET search_path = pg_catalog, s, pg_temp AS $$ SELECT 1 $$",
        [],
    ),
    # pg_temp not last (or not named: then it is searched first).
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER "
        "SET search_path = pg_temp, s AS $$ SELECT 1 $$",
        ["f(text) (defined last in 0099_m.sql)"],
    ),
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER "
        "SET search_path = s AS $$ SELECT 1 $$",
        ["f(text) (defined last in 0099_m.sql)"],
    ),
    # Pinned later, plainly or by a DO block's dynamic ALTER.
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER AS $$ SELECT 1 $$;"
        "ALTER FUNCTION f(text) SET search_path = pg_catalog, s, pg_temp",
        [],
    ),
    (
        "CREATE FUNCTION f(p_a timestamptz) RETURNS int SECURITY DEFINER AS $$ SELECT 1 $$;"
        "DO $$ BEGIN EXECUTE format('ALTER FUNCTION f(timestamp with time zone) '\n"
        "'SET search_path = pg_catalog, %I, pg_temp', current_schema()); END $$",
        [],
    ),
    # A replacement without the pin loses the earlier one.
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER AS $$ SELECT 1 $$;"
        "ALTER FUNCTION f(text) SET search_path = pg_catalog, s, pg_temp;"
        "CREATE OR REPLACE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER AS $$ SELECT 2 $$",
        ["f(text) (defined last in 0099_m.sql)"],
    ),
    # Made a definer by ALTER, with no pin.
    (
        "CREATE FUNCTION f(p_a text) RETURNS int AS $$ SELECT 1 $$;"
        "ALTER FUNCTION f(text) SECURITY DEFINER",
        ["f(text) (defined last in 0099_m.sql)"],
    ),
    # A blanket loop is not the function's own pin; a dropped function is gone.
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER AS $$ SELECT 1 $$;"
        "DO $$ DECLARE v regprocedure; BEGIN FOR v IN SELECT 1 LOOP "
        "EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', v, 's');"
        " END LOOP; END $$",
        ["f(text) (defined last in 0099_m.sql)"],
    ),
    (
        "CREATE FUNCTION f(p_a text) RETURNS int SECURITY DEFINER AS $$ SELECT 1 $$;"
        "DROP FUNCTION f(text)",
        [],
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_the_reading_follows_creates_alters_and_drops(text: str, expected: list[str]) -> None:
    assert unpinned([("0099_m.sql", text)]) == expected


def test_from_current_pins_only_from_the_migration_that_put_pg_temp_last() -> None:
    create = (
        "CREATE FUNCTION f(p_a text) RETURNS int SET search_path FROM CURRENT AS $$ SELECT 1 $$;"
    )
    definer = "ALTER FUNCTION f(text) SECURITY DEFINER"
    before = f"{PINNED_FROM - 1:04d}_early.sql"
    assert unpinned([(before, create), ("0099_m.sql", definer)]) == [
        f"f(text) (defined last in {before})"
    ]
    assert unpinned([(f"{PINNED_FROM:04d}_late.sql", create + definer)]) == []
