"""The SQL door refuses what Python would: one test per attack, each a 22023 refusal.

Public functions take no caller's time and hold inputs and payloads to 1 MiB;
JSON that Python's decoder cannot read (an integer of more than 4300 digits,
nesting deeper than 200 levels) is refused; internal functions, which a worker
role may call, check their own times, delays, priorities and sizes; the history
partition functions create few partitions near now and drop none ahead of it.
Nothing is written by a refused call.
"""

from __future__ import annotations

import json
import sys

import psycopg
import pytest
from sql_roles import SqlSetup

import perdure
from perdure.engine import serialization
from perdure.engine.serialization import MAX_DEPTH, MAX_INT_DIGITS

DEEP = "[" * 3000 + "]" * 3000
BIG = '"' + "x" * (1024 * 1024) + '"'

CLIENT_ATTACKS = {
    "5000-digit integer": ("SELECT {s}.start_run('w', %s::jsonb)", ("1" * 5000,)),
    "1e5000": ("SELECT {s}.start_run('w', %s::jsonb)", ('{"a": [1e5000]}',)),
    "negative 5000 digits": ("SELECT {s}.start_run('w', %s::jsonb)", ("-" + "9" * 4301,)),
    "nested 3000 deep": ("SELECT {s}.start_run('w', %s::jsonb)", (DEEP,)),
    "nested 201 deep": ("SELECT {s}.start_run('w', %s::jsonb)", ("[" * 201 + "1" + "]" * 201,)),
    "input over 1 MiB": ("SELECT {s}.start_run('w', %s::jsonb)", (BIG,)),
    "payload over 1 MiB": ("SELECT {s}.send_signal('k', 'go', %s::jsonb)", (BIG,)),
    "deep payload": ("SELECT {s}.send_signal('k', 'go', %s::jsonb)", (DEEP,)),
    "priority INT_MIN": ("SELECT {s}.start_run('w', p_priority => -2147483648)", ()),
    "delay of 2000 years": ("SELECT {s}.start_run('w', p_delay => interval '2000 years')", ()),
    "negative delay": ("SELECT {s}.start_run('w', p_delay => interval '-1 second')", ()),
    "timeout of 2000 years": ("SELECT {s}.start_run('w', p_timeout => interval '2000 years')", ()),
}


@pytest.mark.parametrize("attack", CLIENT_ATTACKS, ids=list(CLIENT_ATTACKS))
def test_a_client_is_refused(sql_setup: SqlSetup, attack: str) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    query, params = CLIENT_ATTACKS[attack]
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        sql_setup.call(url, query, *params)
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.runs") == [(1,)]
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.signals") == [(0,)]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT {s}.start_run('w', p_now => 'infinity')",
        "SELECT {s}.send_signal('k', 'go', 'null', NULL, p_now => 'infinity')",
        "SELECT {s}.cancel_run('k', 'x', 'infinity')",
    ],
    ids=["start_run", "send_signal", "cancel_run"],
)
def test_a_client_cannot_stamp_time(sql_setup: SqlSetup, query: str) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    # No public form takes p_now; the internal send_signal is not the client's to call.
    with pytest.raises((psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege)):
        sql_setup.call(url, query)


def test_a_deep_but_allowed_input_is_taken(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    value = "[" * 200 + "]" * 200
    sql_setup.call(url, "SELECT {s}.start_run('w', %s::jsonb, p_key => 'k')", value)
    sql_setup.call(url, "SELECT {s}.start_run('w', %s::jsonb, p_key => 'j')", "9" * 4300)
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.runs") == [(2,)]


INSERT = (
    "SELECT * FROM {s}.insert_run(gen_random_uuid(), 'w', 1, 'w', NULL, %s::jsonb, "
    "%s::timestamptz, %s, %s)"
)
WORKER_ATTACKS = {
    "insert_run delay -1e9": (INSERT, ("null", "now", 0, -1e9)),
    "insert_run delay 1e300": (INSERT, ("null", "now", 0, 1e300)),
    "insert_run priority INT_MIN": (INSERT, ("null", "now", -(2**31), 0)),
    "insert_run at infinity": (INSERT, ("null", "infinity", 0, 0)),
    "insert_run in year 294000": (INSERT, ("null", "294000-01-01", 0, 0)),
    "insert_run 1e5000": (INSERT, ("1e5000", "now", 0, 0)),
    "insert_run nested 3000 deep": (INSERT, (DEEP, "now", 0, 0)),
    "send_signal at infinity": (
        "SELECT {s}.send_signal('k', 'go', 'null', NULL, 'infinity'::timestamptz)",
        (),
    ),
    "pause at infinity": (
        "SELECT * FROM {s}.pause_one((SELECT id FROM {s}.runs), 'infinity')",
        (),
    ),
    "300 partitions": ("SELECT {s}.history_partitions_ensure(now(), 300)", ()),
    "partitions of year 0001": ("SELECT {s}.history_partitions_ensure('0001-01-01', 0)", ()),
    "partitions of year 294000": (
        "SELECT {s}.history_partitions_ensure('294000-01-01', 0)",
        (),
    ),
    "partitions at infinity": ("SELECT {s}.history_partitions_ensure('infinity', 0)", ()),
    "drop before infinity": ("SELECT {s}.history_partition_drop('infinity')", ()),
}


@pytest.mark.parametrize("attack", WORKER_ATTACKS, ids=list(WORKER_ATTACKS))
def test_a_worker_is_refused_by_internal_functions(sql_setup: SqlSetup, attack: str) -> None:
    _, url = sql_setup.role("worker")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    parts = sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.history_partitions()")
    query, params = WORKER_ATTACKS[attack]
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        sql_setup.call(url, query, *params)
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.runs") == [(1,)]
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.signals") == [(0,)]
    after = sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.history_partitions()")
    assert after == parts


def test_a_worker_drops_no_partition_ahead_of_now(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("worker")
    sql_setup.call(url, "SELECT {s}.history_partitions_ensure(now(), 3)")
    ahead = "SELECT count(*) FROM {s}.history_partitions() WHERE NOT is_default AND to_at > now()"
    [(kept,)] = sql_setup.call(url, ahead)
    assert kept >= 4
    drop = "SELECT {s}.history_partition_drop(now() + interval '30 days')"
    while sql_setup.call(url, drop) != [(None,)]:
        pass
    assert sql_setup.call(url, ahead) == [(kept,)]


def nested(levels: int, inner: object) -> object:
    value: object = inner
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        nested(199, 1),
        nested(200, 1),
        nested(200, []),
        10**MAX_INT_DIGITS - 1,
        10**MAX_INT_DIGITS,
        -(10**MAX_INT_DIGITS),
        {"a": [1.5, -(10**MAX_INT_DIGITS - 1)]},
    ],
    ids=["199 deep", "200 deep", "201 deep, empty", "4300 digits", "4301", "-4301", "mixed"],
)
def test_sql_and_python_refuse_the_same_json(sql_setup: SqlSetup, value: object) -> None:
    try:
        text = serialization.dumps(value, "the input")
        python_takes = True
    except perdure.SerializationError:
        # Writing a 4301-digit integer needs the interpreter's limit lifted.
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            text = json.dumps(value)
        finally:
            sys.set_int_max_str_digits(limit)
        python_takes = False
    _, url = sql_setup.role("client")
    try:
        sql_setup.call(url, "SELECT {s}.start_run('w', %s::jsonb)", text)
        sql_takes = True
    except psycopg.errors.InvalidParameterValue:
        sql_takes = False
    assert sql_takes == python_takes
    assert MAX_DEPTH == 200
