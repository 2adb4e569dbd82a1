"""Which driver errors mean "the database is unreachable" rather than "the statement failed"."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from perdure.store.connect import fault_message, is_database_fault, is_unavailable


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


@pytest.mark.parametrize(
    "exc",
    [
        # Everything unreachable is a fault of the database ...
        PoolTimeout("couldn't get a connection after 30.00 sec"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        # ... and so are a full disk or other exhausted resource, a system
        # error, and the conflicts the server resolves by giving up a transaction.
        errors.DiskFull("could not extend file: No space left on device"),
        errors.OutOfMemory("out of memory"),
        errors.ConfigurationLimitExceeded("too many open files"),
        errors.IoError("could not read block"),
        errors.UndefinedFile("could not open file"),
        errors.CrashShutdown("terminating connection because of crash of another process"),
        errors.DeadlockDetected("deadlock detected"),
        errors.SerializationFailure("could not serialize access"),
        errors.StatementCompletionUnknown("statement completion unknown"),
    ],
)
def test_faults_of_the_database(exc: Exception) -> None:
    assert is_database_fault(exc)


@pytest.mark.parametrize(
    "exc",
    [
        # The user's statement did it: a constraint, a timeout the user set, bad SQL.
        errors.UniqueViolation("duplicate key"),
        errors.QueryCanceled("canceling statement due to statement timeout"),
        errors.UndefinedTable('relation "nope" does not exist'),
        errors.RaiseException("history is down"),
        errors.InFailedSqlTransaction("current transaction is aborted"),
        # The server refused the URL itself: no retry makes it work.
        psycopg.OperationalError('FATAL:  password authentication failed for user "x"'),
        ValueError("not a database error"),
    ],
)
def test_failures_of_the_work_are_not(exc: Exception) -> None:
    assert not is_database_fault(exc)


def test_a_client_is_told_the_kind_of_fault_and_the_servers_words() -> None:
    disk = errors.DiskFull("could not extend file: No space left on device")
    assert fault_message(disk) == (
        "PostgreSQL is out of resources: could not extend file: No space left on device"
    )
    read_only = errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")
    assert fault_message(read_only).startswith("PostgreSQL is read-only: cannot execute INSERT")


def test_a_task_handed_back_for_a_lasting_fault_is_due_a_moment_later() -> None:
    from perdure.engine.control import Disconnected
    from perdure.engine.handback import LASTING_DELAY, due_after

    def fault(cause: BaseException) -> Disconnected:
        stop = Disconnected("lost")
        stop.__cause__ = cause
        return stop

    assert due_after(fault(psycopg.errors.DiskFull())) == LASTING_DELAY > 0
    assert due_after(fault(psycopg.errors.SerializationFailure())) == 0.0
    assert due_after(fault(psycopg.OperationalError("connection refused"))) == 0.0
    assert due_after(None) == 0.0
