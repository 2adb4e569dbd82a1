"""``start(conn=)`` writes the run in the caller's transaction, sync and async alike."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import perdure


def _define(app: perdure.App) -> None:
    @app.workflow("welcome")
    def welcome(ctx: perdure.SyncContext, value: int) -> int:
        return value


def test_start_async_on_an_async_connection_commits_with_the_caller(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    _define(app)

    async def main() -> tuple[str, str]:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            rolled = await app.start_async("welcome", 1, key="w:1", conn=conn)
            await conn.rollback()
            kept = await app.start_async("welcome", 2, key="w:2", conn=conn)
            await conn.commit()
        return rolled.id, kept.id

    rolled, kept = asyncio.run(main())
    with pytest.raises(perdure.RunNotFound):
        app.get_run(rolled)
    assert app.get_run("w:2").id == kept


def test_a_sync_start_refuses_an_async_connection(app: perdure.App, pg_url: str) -> None:
    _define(app)

    async def connect() -> psycopg.AsyncConnection[object]:
        return await psycopg.AsyncConnection.connect(pg_url)

    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(connect())
    try:
        with pytest.raises(perdure.ConfigurationError, match="start_async also takes"):
            app.start("welcome", 1, conn=conn)
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
    assert app.list_runs() == []
