"""The SQL door of many events at once: emit_events(events jsonb), as a client role calls it.

emit_events is SECURITY DEFINER with a pinned search_path (the temporary
schema last) and checks every element as emit_event checks one event: a JSON
array of at most 10,000 objects {"name", "payload", "key"}, names to the
Python API's rule, keys to 512 characters, payloads to 1 MiB. A refused call
records nothing, not even its good elements. Each attack is one test
asserting the refusal.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from sql_roles import SqlSetup

GOOD = {"name": "paid", "payload": {"n": 1}, "key": "good"}
DEEP = "[" * 3000 + "]" * 3000


def _after_good(bad: str) -> str:
    """A JSON array of a good event, then ``bad`` (JSON text): the bad one is index 1."""
    return "[" + json.dumps(GOOD) + ", " + bad + "]"


ATTACKS = {
    "an object, not an array": json.dumps(GOOD),
    "a string, not an array": '"paid"',
    "an element that is a number": _after_good("5"),
    "an element that is an array": _after_good('["paid", {}]'),
    "an element without a name": _after_good('{"payload": {}}'),
    "a name that is a number": _after_good('{"name": 5}'),
    "a name with a newline": _after_good(json.dumps({"name": "paid\n"})),
    "a name of 129 characters": _after_good(json.dumps({"name": "e" * 129})),
    "an empty key": _after_good('{"name": "paid", "key": ""}'),
    "a key of 513 characters": _after_good(json.dumps({"name": "paid", "key": "k" * 513})),
    "a key that is a number": _after_good('{"name": "paid", "key": 7}'),
    "an unknown field": _after_good('{"name": "paid", "paylod": {}}'),
    "a payload over 1 MiB": _after_good(
        '{"name": "paid", "payload": {"x": "' + "x" * (1024 * 1024) + '"}}'
    ),
    "a payload nested 3000 deep": _after_good('{"name": "paid", "payload": ' + DEEP + "}"),
    "a 5000-digit integer": _after_good('{"name": "paid", "payload": ' + "1" * 5000 + "}"),
    "10,001 events": json.dumps([{"name": "tick"}] * 10_001),
}


def _events(setup: SqlSetup) -> int:
    [(count,)] = setup.call(setup.pg_url, "SELECT count(*) FROM {s}.emitted_events")
    return int(count)  # type: ignore[call-overload]


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_a_bad_call_is_refused_and_writes_nothing(sql_setup: SqlSetup, attack: str) -> None:
    _, url = sql_setup.role("client")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        sql_setup.call(url, "SELECT {s}.emit_events(%s::jsonb)", ATTACKS[attack])
    if ATTACKS[attack].startswith("[" + json.dumps(GOOD)):
        assert "event 1 of the call" in str(refused.value)
    assert _events(sql_setup) == 0


def test_a_null_argument_is_refused(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON array"):
        sql_setup.call(url, "SELECT {s}.emit_events(NULL)")
    assert _events(sql_setup) == 0


def test_a_client_emits_many_once_per_key(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    events = json.dumps([GOOD, {"name": "paid"}, GOOD])
    [(ids,)] = sql_setup.call(url, "SELECT {s}.emit_events(%s::jsonb)", events)
    assert isinstance(ids, list) and len(ids) == 3 and ids[0] == ids[2] != ids[1]
    [(again,)] = sql_setup.call(url, "SELECT {s}.emit_events(%s::jsonb)", json.dumps([GOOD]))
    assert again == [ids[0]]
    assert _events(sql_setup) == 2
    [(empty,)] = sql_setup.call(url, "SELECT {s}.emit_events('[]')")
    assert empty == []


@pytest.mark.parametrize("kind", [None, "reader"], ids=["no grant", "reader"])
def test_a_role_without_the_client_grant_cannot_emit(sql_setup: SqlSetup, kind: str | None) -> None:
    _, url = sql_setup.role(kind)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(url, "SELECT {s}.emit_events(%s::jsonb)", json.dumps([GOOD]))
    assert _events(sql_setup) == 0


def test_a_client_cannot_call_the_internal_form(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(
            url,
            "SELECT * FROM {s}.emit_events(%s::jsonb, now(), 134217728, 1000000)",
            json.dumps([GOOD]),
        )
    assert _events(sql_setup) == 0


def test_a_temporary_table_shadowing_a_perdure_table_is_never_read(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    with psycopg.connect(url, autocommit=True) as conn:
        # Look-alikes of the events' table and the waits': an event with the
        # good key already "emitted" (id 999999), and a trigger that records
        # any write into either.
        conn.execute("CREATE TEMP TABLE fired (what text)")
        conn.execute(
            "CREATE TEMP TABLE emitted_events (id bigint, name text, key text, payload jsonb,"
            " emitted_at timestamptz, UNIQUE (name, key))"
        )
        conn.execute(
            "INSERT INTO pg_temp.emitted_events VALUES (999999, 'paid', 'good', '{}', now())"
        )
        conn.execute(
            "CREATE TEMP TABLE event_waits (run_id uuid, position integer, name text,"
            " match jsonb, anchor text, since timestamptz)"
        )
        conn.execute(
            "CREATE FUNCTION pg_temp.spy() RETURNS trigger LANGUAGE plpgsql AS $f$"
            " BEGIN INSERT INTO pg_temp.fired VALUES (TG_TABLE_NAME); RETURN NULL; END $f$"
        )
        for table in ("emitted_events", "event_waits"):
            conn.execute(
                f"CREATE TRIGGER spy AFTER INSERT OR UPDATE OR DELETE ON pg_temp.{table}"
                " FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.spy()"
            )
        conn.execute("DELETE FROM pg_temp.fired")
        (ids,) = conn.execute(
            psycopg.sql.SQL("SELECT {}.emit_events(%s::jsonb)").format(
                psycopg.sql.Identifier(sql_setup.schema)
            ),
            (json.dumps([GOOD, {"name": "paid", "payload": {"n": 2}}]),),
        ).fetchone()
        assert 999999 not in ids and len(set(ids)) == 2
        assert conn.execute("SELECT count(*) FROM pg_temp.fired").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_temp.emitted_events").fetchone() == (1,)
    # The events went to the schema's table.
    assert _events(sql_setup) == 2
