"""A pooled connection that finds itself on a read-only server is replaced, not reused.

In a failover a connection can end up on a server that does not accept
writes: a standby reached through a pooler or a DNS name still pointing at the
old primary. The session here is made read-only on purpose (the server then
reports ``default_transaction_read_only``, as a standby reports
``in_hot_standby``), which is what such a connection looks like to the client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import perdure
from perdure.store import connect


def build(app: perdure.App) -> None:
    """One trivial workflow to start."""

    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> None:
        return None


def _make_read_only(app: perdure.App) -> Any:
    """Turn the App's one pooled connection read-only; that connection."""

    async def poke() -> Any:
        store = await app._core.get_store()
        async with store.pool.connection() as conn:
            await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            return conn

    return app._core.portal.call(poke())


def test_a_url_asking_for_the_primary_never_reuses_a_read_only_connection(
    pg_url: str, schema: str
) -> None:
    url = make_conninfo(pg_url, target_session_attrs="read-write")
    app = perdure.App(url, schema=schema, pool_size=1)
    build(app)
    try:
        app.start("noop")
        poked = _make_read_only(app)
        # Refused when the pool hands it out again (no statement fails): the
        # start goes through on a new connection.
        app.start("noop")
        assert poked.closed
        assert len(app.list_runs(limit=10)) == 2
    finally:
        app.close()


def test_a_write_refused_as_read_only_counts_as_a_lost_connection(pg_url: str, schema: str) -> None:
    app = perdure.App(pg_url, schema=schema, pool_size=1)
    build(app)
    try:
        app.start("noop")
        poked = _make_read_only(app)
        with pytest.raises(perdure.DatabaseUnavailable) as raised:
            app.start("noop")
        assert isinstance(raised.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
        # The server's own words reach the client.
        assert str(raised.value).startswith("PostgreSQL is read-only: cannot execute")
        assert str(raised.value).endswith("in a read-only transaction")
        # The connection is discarded, not handed out to fail again.
        assert poked.closed
        app.start("noop")
        assert len(app.list_runs(limit=10)) == 2
    finally:
        app.close()


def test_a_start_on_a_callers_read_only_connection_raises_database_unavailable(
    pg_url: str, schema: str
) -> None:
    app = perdure.App(pg_url, schema=schema)
    build(app)
    try:
        app.ensure_schema()
        with psycopg.connect(pg_url) as conn:
            conn.execute("SET TRANSACTION READ ONLY")
            with pytest.raises(perdure.DatabaseUnavailable, match="read-only") as raised:
                app.start("noop", conn=conn)
            assert isinstance(raised.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
            conn.rollback()
        assert app.list_runs(limit=10) == []
    finally:
        app.close()


def test_an_async_start_on_a_callers_read_only_connection_raises_database_unavailable(
    pg_url: str, schema: str
) -> None:
    app = perdure.App(pg_url, schema=schema)
    build(app)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await conn.execute("SET TRANSACTION READ ONLY")
            with pytest.raises(perdure.DatabaseUnavailable, match="read-only"):
                await app.start_async("noop", conn=conn)
            await conn.rollback()

    try:
        app.ensure_schema()
        asyncio.run(main())
        assert app.list_runs(limit=10) == []
    finally:
        app.close()


@pytest.mark.parametrize(
    ("url", "direct", "expected"),
    [
        # The pooled URL asks for the primary: so do the direct connections.
        (
            "postgresql://app@pooler/app?target_session_attrs=read-write",
            "postgresql://app@db-a,db-b/app",
            "postgresql://app@db-a,db-b/app?target_session_attrs=read-write",
        ),
        (
            "host=pooler target_session_attrs=primary",
            "postgresql://app@db-a,db-b/app?sslmode=require",
            "postgresql://app@db-a,db-b/app?sslmode=require&target_session_attrs=read-write",
        ),
        # A direct URL that says what it wants, or a main URL that does not ask, is kept.
        (
            "postgresql://app@pooler/app?target_session_attrs=read-write",
            "postgresql://app@db-a/app?target_session_attrs=any",
            "postgresql://app@db-a/app?target_session_attrs=any",
        ),
        ("postgresql://app@pooler/app", "host=db-a dbname=app", "host=db-a dbname=app"),
        ("postgresql://app@db/app?target_session_attrs=read-write", None, None),
    ],
)
def test_the_direct_url_asks_for_the_primary_when_the_main_url_does(
    url: str, direct: str | None, expected: str | None
) -> None:
    assert connect.session_url(url, direct) == (expected or url)
    assert connect.Endpoints(url, direct).session_url == (expected or url)
