"""Execute statements: on the store's own async pool or on a caller's connection.

``AsyncStore`` owns a psycopg ``AsyncConnectionPool`` bound to one event
loop. ``execute_sync`` and ``execute_async`` run a statement on a
connection the caller owns, inside the caller's transaction, which is how a run
starts atomically with the caller's business write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from perdure.errors import DatabaseUnavailable
from perdure.store.connect import (
    Endpoints,
    fault_message,
    is_database_fault,
    is_read_only,
    read_only_refused,
    reports_read_only,
)
from perdure.store.loaders import ADAPTERS, ENVELOPES
from perdure.store.rows import Fenced, StartResult
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.writes import Checkpoint, Completion, Release, Start

T = TypeVar("T")
log = logging.getLogger("perdure.store")

#: The longest a statement waits for a pooled connection. While the server is
#: away the pool has none to give; the statement then fails as unreachable
#: after this long rather than after psycopg_pool's default of 30 s, so that
#: an execution cut off from the database hands its run back promptly.
WAIT_SECONDS = 10.0

#: A pooled connection returned less than this many seconds ago is handed out
#: again without the pool's check (an empty query: one more round trip and one
#: more transaction for every statement of the hot path). One that sat idle
#: longer is checked, so that a server restart is noticed at checkout.
RECENT_SECONDS = 1.0


def upload_sync(stmt: Statement[Any]) -> None:
    """Upload the offloaded payloads ``stmt``'s rows will reference (before it runs)."""
    offload = stmt.payloads.offload
    if stmt.uploads and offload is not None:
        offload.upload(stmt.uploads)


async def upload(statements: Sequence[Statement[Any]]) -> None:
    """``upload_sync`` of each of ``statements``, in a thread (object stores block)."""
    if any(stmt.uploads for stmt in statements):
        for stmt in statements:
            await asyncio.to_thread(upload_sync, stmt)


async def decode(stmt: Statement[T], found: list[dict[str, Any]]) -> T:
    """``stmt``'s rows decoded, in a thread when opening them fetches offloaded payloads."""
    if stmt.payloads.references(found):
        return await asyncio.to_thread(stmt.decode, found)
    return stmt.decode(found)


def execute_sync(conn: psycopg.Connection[Any], stmt: Statement[T]) -> T:
    """Run ``stmt`` on the caller's sync connection, in its current transaction."""
    upload_sync(stmt)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(stmt.query, stmt.params, prepare=stmt.prepare)
        found = cur.fetchall() if cur.description else []
    ENVELOPES.check(conn)  # a caller's connection may read JSON with other loaders
    return stmt.decode(found)


async def execute_async(conn: psycopg.AsyncConnection[Any], stmt: Statement[T]) -> T:
    """Run ``stmt`` on the caller's async connection, in its current transaction."""
    await upload([stmt])
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(stmt.query, stmt.params, prepare=stmt.prepare)
        found = await cur.fetchall() if cur.description else []
    ENVELOPES.check(conn)  # a caller's connection may read JSON with other loaders
    return await decode(stmt, found)


class AsyncStore:
    """A connection pool plus the statements of one schema.

    When the database cannot be reached or fails on its own (see
    ``is_database_fault``), every
    method raises ``unavailable`` (by default ``DatabaseUnavailable``)
    from the driver's error. A worker passes an engine signal that user code
    cannot catch, so that a lost connection stops an execution instead of
    passing for a failure of the step it interrupted.
    """

    def __init__(
        self,
        url: str,
        statements: Statements,
        *,
        min_size: int = 1,
        max_size: int = 10,
        name: str = "perdure",
        reconnect_seconds: float = 5.0,
        unavailable: type[BaseException] = DatabaseUnavailable,
        direct_url: str | None = None,
        max_idle: float = 600.0,
    ) -> None:
        """Prepare a pool of up to ``max_size`` connections to ``url`` (opened by ``open``).

        While the server is away the pool retries connecting with backoff;
        ``reconnect_seconds`` caps the wait between two attempts, so that the
        pool is back within a few seconds of the server, however long it was
        gone, without trying more than a few times a second. With
        ``direct_url``, ``url`` is taken to go through a transaction-mode
        pooler (see ``perdure.store.connect``). Connections above
        ``min_size`` idle for ``max_idle`` s are closed.
        """
        self.url = url
        self.endpoints = Endpoints(url, direct_url)
        self.statements = statements
        self.unavailable = unavailable
        #: Statements executed and round trips made through this store (for
        #: `perdure worker --stats-file` and the benchmark).
        self.statement_count = 0
        self.round_trips = 0
        self.reconnect_seconds = reconnect_seconds
        self.pool = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            max_idle=max_idle,
            kwargs=self.endpoints.kwargs(name),
            open=False,
            name=name,
            timeout=WAIT_SECONDS,
            # A connection that died with the server is noticed at checkout
            # instead of failing the statement that happens to get it, unless
            # it was in use a moment ago (see RECENT_SECONDS).
            check=self._check_if_idle,
            # psycopg_pool doubles the wait between attempts until it gives up
            # after reconnect_timeout; after a long outage the next attempt
            # could be minutes away. Giving up early and starting a new round
            # at once (_reconnect_again) caps the wait instead.
            reconnect_timeout=reconnect_seconds,
            reconnect_failed=_reconnect_again,
        )

        self._returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    async def _check_if_idle(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """The pool's check, skipped for a connection that was in use a moment ago.

        A connection on a read-only server is refused either way (no round
        trip) when the URL asks for the primary.
        """
        if self.endpoints.primary_only and reports_read_only(conn):
            # Closed, or the pool would take it back and hand it out again.
            await conn.close()
            raise read_only_refused()
        returned = self._returned.get(conn)
        if returned is not None and time.monotonic() - returned < RECENT_SECONDS:
            return
        await AsyncConnectionPool.check_connection(conn)

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
        self.statement_count += 1
        self.round_trips += 1
        if conn is None:
            await upload([stmt])
        with self.reachable():
            if conn is not None:
                return await execute_async(conn, stmt)
            async with self._pooled() as pooled:
                return await execute_async(pooled, stmt)

    async def execute_batch(self, units: Sequence[Sequence[Statement[Any]]]) -> list[list[Any]]:
        """Run every statement of ``units`` in one transaction and one round trip.

        The statements are pipelined (psycopg's pipeline mode) up to one Sync
        message: they go out together, their answers come back together, and
        the server runs them in one implicit transaction that the Sync
        commits. So several statements cost one round trip and one commit,
        and all commit or none does: on an error nothing is written and the
        error is raised. (psycopg's ``transaction()`` is not used: in
        pipeline mode it syncs after BEGIN and again at COMMIT.) Returns each
        unit's decoded results, in order.
        """
        statements = [stmt for unit in units for stmt in unit]
        self.statement_count += len(statements)
        self.round_trips += 1
        await upload(statements)
        with self.reachable():
            async with self._pooled() as conn:
                async with conn.pipeline():
                    cursors = []
                    for stmt in statements:
                        cursor = conn.cursor(row_factory=dict_row)
                        await cursor.execute(stmt.query, stmt.params)
                        cursors.append(cursor)
                found = [await c.fetchall() if c.description else [] for c in cursors]
        decoded = iter(
            [await decode(stmt, rows) for stmt, rows in zip(statements, found, strict=True)]
        )
        return [[next(decoded) for _ in unit] for unit in units]

    # The writes on claimed work and starts: lists of records, one statement each.

    async def write_checkpoints(
        self, checkpoints: Sequence[Checkpoint], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[Fenced]:
        """Record steps' outcomes, each fenced on its own task (on ``conn``, in its
        transaction, if given); one answer per checkpoint, in order."""
        return await self.execute(self.statements.steps.checkpoints(checkpoints), conn)

    async def complete_runs(
        self, completions: Sequence[Completion], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[Fenced]:
        """Finish runs (with their last checkpoints), each fenced on its own task; one
        answer per completion, in order."""
        return await self.execute(self.statements.runs.complete(completions), conn)

    async def write_batch(
        self, checkpoints: Sequence[Checkpoint], completions: Sequence[Completion]
    ) -> tuple[list[Fenced], list[Fenced]]:
        """Write ``checkpoints`` and ``completions`` (of different tasks) in one
        transaction and one round trip: one statement per kind. All commit or none
        does; each is fenced on its own task. Their answers, in order."""
        statements: list[Statement[list[Fenced]]] = []
        if checkpoints:
            statements.append(self.statements.steps.checkpoints(checkpoints))
        if completions:
            statements.append(self.statements.runs.complete(completions))
        if len(statements) == 1:
            answers = await self.execute(statements[0])
            return (answers, []) if checkpoints else ([], answers)
        written, completed = (await self.execute_batch([statements]))[0]
        return written, completed

    async def insert_runs(
        self, starts: Sequence[Start], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[StartResult | None]:
        """Start runs of one shape (on ``conn``, in its transaction, if given); one
        answer per start, in order (None: a concurrent start of its key; try again)."""
        return await self.execute(self.statements.runs.insert(starts), conn)

    async def release_tasks(
        self, releases: Sequence[Release], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[bool]:
        """Give held tasks back, each fenced on its own; whether each was released."""
        return await self.execute(self.statements.tasks.release(releases), conn)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in a transaction, for statements that must commit together.

        Pass the connection to ``execute``; the transaction commits when
        the block ends, or rolls back if it raises.
        """
        self.round_trips += 2  # BEGIN and COMMIT
        with self.reachable():
            async with self._pooled() as conn, conn.transaction():
                yield conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An autocommit connection held for a block (session locks live on one).

        Behind a pooler it is a connection of its own on the direct URL, not a
        pooled one: a session lock must stay on one server connection.
        """
        with self.reachable():
            if self.endpoints.pooled:
                async with await psycopg.AsyncConnection.connect(
                    self.endpoints.session_url,
                    autocommit=True,
                    application_name=f"{self.pool.name}-session",
                    context=ADAPTERS,
                ) as conn:
                    yield conn
                return
            async with self._pooled() as conn:
                yield conn

    @asynccontextmanager
    async def _pooled(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection, stamped with the moment it goes back (see
        ``RECENT_SECONDS``), or closed, so that the pool replaces it, if it
        proved to be on a server that cannot write: reused, it would fail again.

        (Not the pool's reset hook: with one, psycopg_pool returns each
        connection from a background task, so that a statement right after
        another finds the pool empty and grows it by a connection.)
        """
        async with self.pool.connection() as conn:
            try:
                yield conn
            except Exception as exc:
                if is_read_only(exc):
                    await conn.close()
                raise
            finally:
                self._returned[conn] = time.monotonic()
                if self.endpoints.primary_only and not conn.closed and reports_read_only(conn):
                    await conn.close()

    def reachable(self) -> contextlib.AbstractContextManager[None]:
        """A block in which "database unreachable" errors become ``unavailable``."""
        return reachable(self.unavailable)

    def sync_pool(self, max_size: int, name: str) -> ConnectionPool:
        """A sync pool on the same server, with the same reconnection policy (opened)."""
        return ConnectionPool(
            self.url,
            min_size=0,
            max_size=max_size,
            kwargs=self.endpoints.kwargs(name),
            open=True,
            name=name,
            check=self._check_sync,
            reconnect_timeout=self.reconnect_seconds,
            reconnect_failed=_reconnect_again_sync,
        )

    def _check_sync(self, conn: psycopg.Connection[Any]) -> None:
        """The sync pool's check: refuse a read-only server's connection, then the usual."""
        if self.endpoints.primary_only and reports_read_only(conn):
            conn.close()
            raise read_only_refused()
        ConnectionPool.check_connection(conn)


@contextlib.contextmanager
def reachable(unavailable: type[BaseException]) -> Iterator[None]:
    """Turn a driver error that is the database's fault (see
    ``is_database_fault``) into ``unavailable``."""
    try:
        yield
    except Exception as exc:
        if is_database_fault(exc):
            raise unavailable(fault_message(exc)) from exc
        raise


async def _reconnect_again(pool: AsyncConnectionPool) -> None:
    """After a round of reconnection attempts gave up: start another one now."""
    log.warning("pool %r still cannot reach PostgreSQL; trying again", pool.name)
    # check() grows the pool again when it has no connection left; on a pool
    # being closed there is nothing to do.
    with contextlib.suppress(Exception):
        await pool.check()


def _reconnect_again_sync(pool: ConnectionPool) -> None:
    """``_reconnect_again`` for a sync pool."""
    log.warning("pool %r still cannot reach PostgreSQL; trying again", pool.name)
    with contextlib.suppress(Exception):
        pool.check()
