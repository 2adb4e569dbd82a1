"""``start(conn=)`` writes the run in the caller's transaction, sync and async alike."""

from __future__ import annotations

import asyncio
import concurrent.futures

import psycopg
import pytest

import perdure
from helpers import wait_until


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


def _waiting_on_a_lock(db_url: str, pid: int) -> bool:
    with psycopg.connect(db_url) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_start_on_a_blocked_connection_does_not_delay_other_starts(
    app: perdure.App, pg_url: str, form: str
) -> None:
    _define(app)
    app.start("welcome", 0)  # the pool and the schema are ready
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as blocked:
        # holder's uncommitted run takes key k: a start of k on blocked waits for holder.
        app.start("welcome", 1, key="k", conn=holder)

        def blocked_start() -> perdure.RunHandle:
            if form == "sync":
                return app.start("welcome", 2, key="k", conn=blocked)
            return asyncio.run(app.start_async("welcome", 2, key="k", conn=blocked))

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            waiting = pool.submit(blocked_start)
            try:
                wait_until(
                    lambda: waiting.done() or _waiting_on_a_lock(pg_url, blocked.info.backend_pid),
                    what="the caller's start to wait on the key's lock",
                )
                assert not waiting.done()
                # Another thread's start on the App's pool completes meanwhile.
                other = pool.submit(app.start, "welcome", 3, key="other")
                assert other.result(timeout=20).created
                assert not waiting.done()
            finally:
                holder.rollback()  # the caller's start goes on
            handle = waiting.result(timeout=20)
        blocked.commit()
    assert handle.created
    assert app.get_run("k").id == handle.id
