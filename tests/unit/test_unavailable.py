"""Which driver errors mean "the database is unreachable" rather than "the statement failed"."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from perdure.store.connect import is_unavailable


@pytest.mark.parametrize(
    "exc",
    [
        PoolTimeout("couldn't get a connection after 30.00 sec"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.InterfaceError("the connection is closed"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.CannotConnectNow("the database system is starting up"),
        errors.TooManyConnections("sorry, too many clients already"),
        errors.ConnectionFailure("connection failure"),
    ],
)
def test_lost_refused_or_full_connections_are_unavailable(exc: Exception) -> None:
    assert is_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.DeadlockDetected("deadlock detected"),
        errors.SerializationFailure("could not serialize access"),
        errors.QueryCanceled("canceling statement due to statement timeout"),
        errors.UniqueViolation("duplicate key"),
        errors.RaiseException("history is down"),
        ValueError("not a database error"),
    ],
)
def test_errors_of_the_statement_itself_are_not(exc: Exception) -> None:
    assert not is_unavailable(exc)
