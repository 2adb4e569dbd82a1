"""A refusal of the server reaches an App's caller as a typed perdure error.

A role without the privilege a call needs gets ``PermissionDenied`` (with the
grant to ask for), any other refusal ``DatabaseError`` with its SQLSTATE:
never a driver's class. One attack per test.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import psycopg
import pytest
from sql_roles import SqlSetup

import perdure
from perdure.errors import DatabaseError, PermissionDenied, SchemaError


def test_a_reader_role_cannot_start_a_run_and_is_told_which_grant(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("reader")
    with perdure.App(url, schema=sql_setup.schema, auto_migrate=False) as app:
        with pytest.raises(PermissionDenied) as caught:
            app.start("w", 1)
        assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
        assert caught.value.sqlstate == "42501"
        assert "--grant-client" in str(caught.value)
        assert app.list_runs() == []  # what it may do still works
    assert sql_setup.call(sql_setup.owner_url, "SELECT count(*) FROM {s}.runs") == [(0,)]


def test_a_role_without_grants_is_told_to_ask_for_one(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role(None)
    with perdure.App(url, schema=sql_setup.schema, auto_migrate=False) as app:
        with pytest.raises(SchemaError, match=r"may not read schema .* --grant-to"):
            app.list_runs()


def test_the_async_form_refuses_alike(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("reader")

    async def main() -> None:
        async with perdure.App(url, schema=sql_setup.schema, auto_migrate=False) as app:
            await app.start_async("w", 1)

    with pytest.raises(PermissionDenied):
        asyncio.run(main())


def test_a_callers_failed_transaction_is_a_database_error(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role("worker")
    with perdure.App(url, schema=sql_setup.schema, auto_migrate=False) as app:
        with psycopg.connect(url) as conn:
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1 / 0")
            with pytest.raises(DatabaseError) as caught:
                app.start("w", 1, conn=conn)
            assert not isinstance(caught.value, PermissionDenied)
            assert caught.value.sqlstate == "25P02"  # in a failed transaction
            conn.rollback()
    assert sql_setup.call(sql_setup.owner_url, "SELECT count(*) FROM {s}.runs") == [(0,)]


def test_the_cli_prints_one_line_for_a_role_without_grants(sql_setup: SqlSetup) -> None:
    _, url = sql_setup.role(None)
    done = subprocess.run(
        [sys.executable, "-m", "perdure", "runs", "list", "--schema", sql_setup.schema],
        env={**os.environ, "PERDURE_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("Error: ")
    assert "--grant-to" in done.stderr
