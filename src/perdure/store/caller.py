"""What the API needs from psycopg: callers' connections and the errors of a signal.

The API names psycopg only through this module: the connection types a caller
passes as ``conn=``, running one statement on such a connection, checking a
schema on a short connection of its own, and reading a signal's refusal.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg
import psycopg.errors

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
]


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
