"""The SQL door of emitted events: a client role emits through emit_event, and only so.

emit_event(name, payload, key) is SECURITY DEFINER with a pinned search_path
and holds payloads to 1 MiB, names to the Python API's rule and keys to 512
characters; its internal form (with the caller's time and payload limit) is
the workers' only. Each attack is one test asserting the refusal, and a
refused call records nothing.
"""

from __future__ import annotations

import psycopg
import pytest
from sql_roles import SqlSetup

DEEP = "[" * 3000 + "]" * 3000
BIG = '{"x": "' + "x" * (1024 * 1024) + '"}'

ATTACKS = {
    "payload over 1 MiB": ("SELECT {s}.emit_event('paid', %s::jsonb)", (BIG,)),
    "payload nested 3000 deep": ("SELECT {s}.emit_event('paid', %s::jsonb)", (DEEP,)),
    "5000-digit integer": (
        "SELECT {s}.emit_event('paid', %s::jsonb)",
        ('{"n": ' + "1" * 5000 + "}",),
    ),
    "name with a newline": ("SELECT {s}.emit_event(%s)", ("paid\n",)),
    "empty name": ("SELECT {s}.emit_event('')", ()),
    "name of 129 characters": ("SELECT {s}.emit_event(%s)", ("e" * 129,)),
    "empty key": ("SELECT {s}.emit_event('paid', '{{}}', '')", ()),
    "key of 513 characters": ("SELECT {s}.emit_event('paid', '{{}}', %s)", ("k" * 513,)),
}


def _events(setup: SqlSetup) -> int:
    [(count,)] = setup.call(setup.pg_url, "SELECT count(*) FROM {s}.emitted_events")
    return int(count)  # type: ignore[call-overload]


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_a_client_emit_is_refused(sql_setup: SqlSetup, attack: str) -> None:
    _, url = sql_setup.role("client")
    query, params = ATTACKS[attack]
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        sql_setup.call(url, query, *params)
    assert _events(sql_setup) == 0


def test_a_client_emits_once_per_key(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    [(first,)] = sql_setup.call(url, "SELECT {s}.emit_event('paid', '{{\"n\": 1}}', 'k')")
    [(again,)] = sql_setup.call(url, "SELECT {s}.emit_event('paid', '{{\"n\": 2}}', 'k')")
    assert first == again
    assert _events(sql_setup) == 1
    # The client reads no table, the events' included.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(url, "SELECT * FROM {s}.emitted_events")


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM {s}.emit_event('paid', '{{}}', NULL, now(), 134217728)",
        "SELECT * FROM {s}.emit_event('paid', '{{}}', NULL, 'infinity', 1048576)",
    ],
    ids=["internal form", "internal form at infinity"],
)
def test_a_client_cannot_call_the_internal_form(sql_setup: SqlSetup, query: str) -> None:
    _, url = sql_setup.role("client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_setup.call(url, query)
    assert _events(sql_setup) == 0


@pytest.mark.parametrize(
    ("query", "params"),
    [
        ("SELECT * FROM {s}.emit_event('paid', '{{}}', NULL, 'infinity', 1048576)", ()),
        ("SELECT * FROM {s}.emit_event('paid', '{{}}', NULL, now(), 0)", ()),
        ("SELECT * FROM {s}.emit_event('paid', '{{}}', NULL, now(), 200000000)", ()),
    ],
    ids=["at infinity", "no payload allowed", "payload limit over 128 MiB"],
)
def test_a_worker_is_refused_by_the_internal_form(
    sql_setup: SqlSetup, query: str, params: tuple[object, ...]
) -> None:
    _, url = sql_setup.role("worker")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        sql_setup.call(url, query, *params)
    assert _events(sql_setup) == 0
