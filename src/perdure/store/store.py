"""Execute statements: on the store's own async pool or on a caller's connection.

:class:`AsyncStore` owns a psycopg ``AsyncConnectionPool`` bound to one event
loop. :func:`execute_sync` and :func:`execute_async` run a statement on a
connection the caller owns, inside the caller's transaction, which is how a run
starts atomically with the caller's business write.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from perdure.errors import DatabaseUnavailable
from perdure.store.statement import Statement
from perdure.store.statements import Statements

T = TypeVar("T")
log = logging.getLogger("perdure.store")


def execute_sync(conn: psycopg.Connection[Any], stmt: Statement[T]) -> T:
    """Run ``stmt`` on the caller's sync connection, in its current transaction."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(stmt.query, stmt.params)
        found = cur.fetchall() if cur.description else []
    return stmt.decode(found)


async def execute_async(conn: psycopg.AsyncConnection[Any], stmt: Statement[T]) -> T:
    """Run ``stmt`` on the caller's async connection, in its current transaction."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(stmt.query, stmt.params)
        found = await cur.fetchall() if cur.description else []
    return stmt.decode(found)


class AsyncStore:
    """A connection pool plus the statements of one schema."""

    def __init__(
        self,
        url: str,
        statements: Statements,
        *,
        min_size: int = 1,
        max_size: int = 10,
        name: str = "perdure",
    ) -> None:
        """Prepare a pool of up to ``max_size`` connections to ``url`` (opened by :meth:`open`)."""
        self.url = url
        self.q = statements
        self.pool = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "application_name": name},
            open=False,
            name=name,
            # A connection that died with the server is noticed at checkout
            # instead of failing the statement that happens to get it.
            check=AsyncConnectionPool.check_connection,
        )

    async def open(self, timeout: float = 30.0) -> None:
        """Open the pool and wait until it holds ``min_size`` connections."""
        try:
            await self.pool.open(wait=True, timeout=timeout)
        except Exception as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        """Close every connection of the pool."""
        await self.pool.close()

    async def execute(
        self, stmt: Statement[T], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> T:
        """Run ``stmt`` on ``conn`` if given, else on a pooled autocommit connection."""
        if conn is not None:
            return await execute_async(conn, stmt)
        async with self.pool.connection() as pooled:
            return await execute_async(pooled, stmt)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in a transaction, for statements that must commit together.

        Pass the connection to :meth:`execute`; the transaction commits when
        the block ends, or rolls back if it raises.
        """
        async with self.pool.connection() as conn, conn.transaction():
            yield conn
