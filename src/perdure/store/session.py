"""What the engine holds of a database session, without naming psycopg itself.

The engine passes connections and pools around and reacts to a lock that was
not granted in time; it names them through these aliases and this module's
``LockBusy``, so that psycopg appears only in the store. The LISTEN
connection of a worker's wakeup is opened here as well.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

#: A connection of the async pool (pass it to ``AsyncStore.execute``).
AsyncConnection = psycopg.AsyncConnection[Any]
#: The small sync pool for ``ctx.transaction`` steps written as plain ``def``.
SyncPool = ConnectionPool

__all__ = ["AsyncConnection", "LockBusy", "SyncPool", "listen", "lock_busy"]


class LockBusy(Exception):
    """A lock was not granted within the session's ``lock_timeout``."""


@contextmanager
def lock_busy() -> Iterator[None]:
    """Raise ``LockBusy`` for a lock the server did not grant in time."""
    try:
        yield
    except psycopg.errors.LockNotAvailable as exc:
        raise LockBusy(str(exc)) from exc


@asynccontextmanager
async def listen(
    url: str, channel: str, application_name: str
) -> AsyncIterator[AsyncIterator[Any]]:
    """A dedicated connection LISTENing on ``channel``; iterate what it yields for
    its notifications. Any error of the connection is raised as it is."""
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, application_name=application_name
    ) as conn:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        yield conn.notifies()
