"""What the API needs from psycopg: callers' connections and the errors of a signal.

The API names psycopg only through this module: the connection types a caller
passes as ``conn=``, running one statement on such a connection, checking a
schema on a short connection of its own, and reading a signal's refusal.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg
import psycopg.errors

from perdure.errors import DatabaseUnavailable
from perdure.store import migrate
from perdure.store.connect import connect
from perdure.store.store import execute_async, execute_sync

T = TypeVar("T")

#: A caller's psycopg connection, for annotations outside the store.
Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]

__all__ = [
    "AsyncConnection",
    "Connection",
    "Refusal",
    "check_current",
    "execute_async",
    "execute_sync",
    "is_async",
    "is_sync",
    "signal_refusal",
    "wait_reachable",
]

log = logging.getLogger("perdure.worker")


def is_sync(conn: object) -> bool:
    """Whether ``conn`` is a psycopg (sync) connection."""
    return isinstance(conn, psycopg.Connection)


def is_async(conn: object) -> bool:
    """Whether ``conn`` is a psycopg async connection."""
    return isinstance(conn, psycopg.AsyncConnection)


def check_current(url: str, schema: str) -> None:
    """Check, on a short connection, that ``schema`` is migrated (SchemaError if not)."""
    with connect(url) as conn:
        migrate.ensure_current(conn, schema)


def wait_reachable(url: str, timeout: float) -> None:
    """Wait until PostgreSQL at ``url`` accepts a connection, for up to ``timeout`` s.

    Tries at once, then again with a growing pause (at most 5 s), logging each
    failure. DatabaseUnavailable once ``timeout`` has passed (at once when it is 0).
    """
    deadline = time.monotonic() + timeout
    pause = 0.5
    while True:
        left = deadline - time.monotonic()
        try:
            # libpq's connect_timeout is whole seconds, at least 2.
            with psycopg.connect(url, connect_timeout=max(2, int(min(left, 10)))):
                return
        except psycopg.Error as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = (
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                )
                raise DatabaseUnavailable(
                    f"PostgreSQL did not accept a connection within {timeout:g} s: {reason}"
                ) from None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning("database unreachable (%s); trying again for %.0f s more", first, left)
        time.sleep(min(pause, max(left, 0.0)))
        pause = min(pause * 2, 5.0)


class Refusal(enum.Enum):
    """Why the database refused a signal."""

    NO_RUN = "no run"
    FINISHED = "finished"


async def signal_refusal(sent: Awaitable[T]) -> T | Refusal:
    """The signal statement's result, or why it was refused."""
    try:
        return await sent
    except psycopg.errors.NoDataFound:
        return Refusal.NO_RUN
    except psycopg.errors.ObjectNotInPrerequisiteState:
        return Refusal.FINISHED
