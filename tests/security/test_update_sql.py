"""The SQL door to updates (send_update, update_reply): one test per attack.

A client role sends an update and waits for its reply from SQL. Each refusal
is a typed SQLSTATE, and a refused call writes nothing: no request, no run.
Runs have no owner among client roles (a client may act on every run, as
through send_signal), so there is no one else's run to reach.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql
from sql_roles import SqlSetup

DEEP = "[" * 3000 + "]" * 3000
BIG = '"' + "x" * (1024 * 1024) + '"'

#: Each attack: the query, its parameters and the error class it must raise.
ATTACKS: dict[str, tuple[str, tuple[object, ...], type[Exception]]] = {
    "reply with a NULL update id": (
        "SELECT {s}.update_reply('k', NULL, 1)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with an empty update id": (
        "SELECT {s}.update_reply('k', '', 1)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a 201-character update id": (
        "SELECT {s}.update_reply('k', %s, 1)",
        ("u" * 201,),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a timeout of a billion seconds": (
        "SELECT {s}.update_reply('k', 'u-1', 1e9)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a timeout of 301 seconds": (
        "SELECT {s}.update_reply('k', 'u-1', 301)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a negative timeout": (
        "SELECT {s}.update_reply('k', 'u-1', -1)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a NaN timeout": (
        "SELECT {s}.update_reply('k', 'u-1', 'NaN')",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with an infinite timeout": (
        "SELECT {s}.update_reply('k', 'u-1', 'infinity')",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply with a NULL timeout": (
        "SELECT {s}.update_reply('k', 'u-1', NULL)",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply of an unknown run": (
        "SELECT {s}.update_reply('no-such-run', 'u-1', 1)",
        (),
        psycopg.errors.NoDataFound,
    ),
    "reply with a 513-character run reference": (
        "SELECT {s}.update_reply(%s, 'u-1', 1)",
        ("r" * 513,),
        psycopg.errors.InvalidParameterValue,
    ),
    "reply of an update never sent": (
        "SELECT {s}.update_reply('k', 'never-sent', 1)",
        (),
        psycopg.errors.NoDataFound,
    ),
    "send with a malformed update name": (
        "SELECT {s}.send_update('k', 'x''; DROP TABLE runs; --', 'null')",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "send with a NULL update name": (
        "SELECT {s}.send_update('k', NULL, 'null')",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "send with an empty update id": (
        "SELECT {s}.send_update('k', 'add', 'null', '')",
        (),
        psycopg.errors.InvalidParameterValue,
    ),
    "send with a 201-character update id": (
        "SELECT {s}.send_update('k', 'add', 'null', %s)",
        ("u" * 201,),
        psycopg.errors.InvalidParameterValue,
    ),
    "send a payload over 1 MiB": (
        "SELECT {s}.send_update('k', 'add', %s::jsonb)",
        (BIG,),
        psycopg.errors.InvalidParameterValue,
    ),
    "send a payload nested 3000 deep": (
        "SELECT {s}.send_update('k', 'add', %s::jsonb)",
        (DEEP,),
        psycopg.errors.InvalidParameterValue,
    ),
    "send to an unknown run": (
        "SELECT {s}.send_update('no-such-run', 'add', 'null')",
        (),
        psycopg.errors.NoDataFound,
    ),
    "send with a stamped time (the internal form)": (
        "SELECT {s}.request_update((SELECT gen_random_uuid()), 'u', 'add', 'null', now())",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
}


def _requests(setup: SqlSetup) -> list[tuple[object, ...]]:
    return setup.call(setup.pg_url, "SELECT update_id, name, status FROM {s}.updates ORDER BY id")


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_a_client_is_refused_an_update_call(sql_setup: SqlSetup, attack: str) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    query, params, error = ATTACKS[attack]
    with pytest.raises(error):
        sql_setup.call(url, query, *params)
    assert _requests(sql_setup) == []
    assert sql_setup.call(sql_setup.pg_url, "SELECT count(*) FROM {s}.runs") == [(1,)]


def test_a_client_cannot_reuse_an_update_id_for_another_update(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    assert sql_setup.call(url, "SELECT {s}.send_update('k', 'add', '1', 'u-1')") == [("u-1",)]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="is update add, not remove"):
        sql_setup.call(url, "SELECT {s}.send_update('k', 'remove', '1', 'u-1')")
    assert _requests(sql_setup) == [("u-1", "add", "requested")]


def test_a_client_cannot_send_an_update_to_a_finished_run(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    sql_setup.call(url, "SELECT {s}.cancel_run('k')")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="no more updates"):
        sql_setup.call(url, "SELECT {s}.send_update('k', 'add', '1')")
    assert _requests(sql_setup) == []


def test_a_clients_temporary_table_does_not_stand_in_for_the_updates(
    sql_setup: SqlSetup,
) -> None:
    """A temporary ``updates`` (and ``runs``) holding a forged reply is never read:
    the definer functions search pg_temp last."""
    _, url = sql_setup.role("client")
    (run_id,) = sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")[0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TEMP TABLE updates AS SELECT %s::uuid AS run_id, 'forged' AS update_id,"
            " 'add'::text AS name, 'completed'::text AS status, '\"forged\"'::jsonb AS result,"
            " NULL::jsonb AS error",
            (run_id,),
        )
        schema = sql.Identifier(sql_setup.schema)
        conn.execute(sql.SQL("SET search_path = pg_temp, {}").format(schema))
        with pytest.raises(psycopg.errors.NoDataFound, match="no update forged"):
            conn.execute(sql.SQL("SELECT {}.update_reply('k', 'forged', 0)").format(schema))


def test_the_update_functions_are_definers_with_pg_temp_last(sql_setup: SqlSetup) -> None:
    rows = sql_setup.call(
        sql_setup.pg_url,
        "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
        " WHERE p.pronamespace = %s::regnamespace"
        " AND p.proname IN ('send_update', 'update_reply') ORDER BY p.proname",
        sql_setup.schema,
    )
    assert [r[0] for r in rows] == ["send_update", "update_reply"]
    for _, definer, config in rows:
        assert definer is True
        (path,) = [c for c in config if c.startswith("search_path=")]
        assert path.split(",")[-1].strip() == "pg_temp", path


def test_a_pending_reply_times_out_typed_within_its_timeout_and_stays(
    sql_setup: SqlSetup,
) -> None:
    _, url = sql_setup.role("client")
    sql_setup.call(url, "SELECT {s}.start_run('w', p_key => 'k')")
    sql_setup.call(url, "SELECT {s}.send_update('k', 'add', '1', 'u-1')")
    began = time.monotonic()
    with pytest.raises(psycopg.Error) as caught:
        sql_setup.call(url, "SELECT {s}.update_reply('k', 'u-1', 0.3)")
    assert caught.value.sqlstate == "PU003"
    assert 0.25 <= time.monotonic() - began < 10
    assert _requests(sql_setup) == [("u-1", "add", "requested")]
