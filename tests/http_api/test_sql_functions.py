"""The SQL functions of migration 0011, called as any PostgreSQL client would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker
from http_api.workload import FAST


@pytest.fixture
def sql(defined: perdure.App, pg_url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection with the test workflows registered."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        yield conn


def one(conn: psycopg.Connection[Any], query: str, *args: object) -> Any:
    """The first column of the first row."""
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """How many runs, tasks and history rows exist."""
    return (
        one(conn, "SELECT count(*) FROM runs"),
        one(conn, "SELECT count(*) FROM tasks"),
        one(conn, "SELECT count(*) FROM history"),
    )


def test_start_run_writes_what_app_start_writes(sql: psycopg.Connection[Any]) -> None:
    run_id = str(one(sql, "SELECT start_run('echo', '{\"a\": 1}', p_key => 'k1')"))
    run = sql.execute(
        "SELECT workflow, version, queue, status, input, key FROM runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert run == ("echo", 1, "sqlq", "queued", {"a": 1}, "k1")
    task = sql.execute("SELECT kind, queue, status FROM tasks WHERE run_id = %s", (run_id,))
    assert task.fetchall() == [("run", "sqlq", "ready")]
    events = sql.execute("SELECT event FROM history WHERE run_id = %s", (run_id,)).fetchall()
    assert events == [("run_created",)]
    assert run_id[14] == "7", "a time-ordered id, as perdure mints"
    # The same key again: the same run, nothing new written.
    before = counts(sql)
    assert str(one(sql, "SELECT start_run('echo', '{}', p_key => 'k1')")) == run_id
    assert counts(sql) == before


def test_a_start_inside_a_rolled_back_transaction_leaves_nothing(
    sql: psycopg.Connection[Any],
) -> None:
    with pytest.raises(RuntimeError), sql.transaction():
        one(sql, "SELECT start_run('echo', 'null')")
        raise RuntimeError("the caller's transaction fails")
    assert counts(sql)[:2] == (0, 0)


@pytest.mark.parametrize(
    ("call", "sqlstate", "message"),
    [
        ("start_run('no.such')", "42704", "workflow no.such is not registered"),
        ("start_run('echo', p_version => 7)", "42704", "version 7 is not registered"),
        ("start_run('bad name')", "22023", "invalid workflow name"),
        ("start_run('echo', p_delay => '-1 s')", "22023", "delay must not be negative"),
        ("start_run('echo', p_tags => '[1]')", "22023", "tags must be a JSON object"),
        ("start_run('echo', p_tags => '{\"a\": 1}')", "22023", "string value"),
        ("start_run('echo', p_key => '')", "22023", "key must be 1 to 512"),
        ("run_status('nope')", "P0002", "no run with id or key nope"),
        ("cancel_run('nope')", "P0002", "no run with id or key nope"),
        ("get_event('nope', 'x')", "P0002", "no run"),
        ("read_stream('nope', 'x')", "P0002", "no run"),
    ],
)
def test_bad_arguments_raise_a_stable_sqlstate_and_write_nothing(
    sql: psycopg.Connection[Any], call: str, sqlstate: str, message: str
) -> None:
    before = counts(sql)
    with pytest.raises(psycopg.Error) as caught:
        sql.execute(f"SELECT * FROM {call}")
    assert caught.value.sqlstate == sqlstate
    assert message in str(caught.value)
    assert counts(sql) == before


def test_a_key_of_another_workflow_is_a_unique_violation(sql: psycopg.Connection[Any]) -> None:
    one(sql, "SELECT start_run('echo', p_key => 'shared')")
    with pytest.raises(psycopg.errors.UniqueViolation, match="belongs to a run of workflow"):
        sql.execute("SELECT start_run('chat', p_key => 'shared')")


def test_status_cancel_pause_resume(sql: psycopg.Connection[Any]) -> None:
    run_id = str(one(sql, "SELECT start_run('echo', p_key => 'steer')"))
    assert one(sql, "SELECT pause_run('steer')") == "paused"
    assert one(sql, "SELECT pause_run(%s)", run_id) == "paused", "pausing again is a no-op"
    assert one(sql, "SELECT status FROM tasks WHERE run_id = %s", run_id) == "paused"
    assert one(sql, "SELECT resume_run('steer')") == "queued"
    with pytest.raises(psycopg.Error) as caught:
        sql.execute("SELECT resume_run('steer')")
    assert caught.value.sqlstate == "55000"
    assert one(sql, "SELECT cancel_run('steer', 'no longer needed')") == "cancelled"
    assert one(sql, "SELECT cancel_run('steer')") == "cancelled", "cancelling again is a no-op"
    status = sql.execute("SELECT status, error FROM run_status('steer')").fetchone()
    assert status == ("cancelled", {"type": "Cancelled", "message": "no longer needed"})
    assert one(sql, "SELECT count(*) FROM tasks WHERE run_id = %s", run_id) == 0


def test_against_a_worker_event_signal_stream_and_result(
    sql: psycopg.Connection[Any], app: perdure.App
) -> None:
    run_id = str(one(sql, "SELECT start_run('chat', '{}')"))
    with BackgroundWorker(app, **FAST):
        assert app.get_event(run_id, "ready", timeout=30) == {"stage": 1}
        assert one(sql, "SELECT get_event(%s, 'ready')", run_id) == {"stage": 1}
        assert one(sql, "SELECT get_event(%s, 'missing')", run_id) is None
        one(sql, "SELECT send_signal(%s, 'reply', '\"world\"')", run_id)
        assert app.handle(run_id).result(timeout=30) == {"got": "world"}
    rows = sql.execute("SELECT seq, value, closed FROM read_stream(%s, 'words')", (run_id,))
    entries = rows.fetchall()
    assert [value for _, value, closed in entries if not closed] == ["hello", "world"]
    assert entries[-1][2] is True
    after = entries[0][0]
    rest = sql.execute("SELECT value FROM read_stream(%s, 'words', %s)", (run_id, after))
    assert rest.fetchall()[0] == ("world",)
    status = sql.execute("SELECT status, output, error FROM run_status(%s)", (run_id,))
    assert status.fetchone() == ("completed", {"got": "world"}, None)
