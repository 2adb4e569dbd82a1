"""How to connect: the pooled URL for statements, a direct URL for what needs a session.

Behind a transaction-mode pooler (PgBouncer, Supavisor, RDS Proxy) each
transaction may run on a different server connection, so nothing may outlive
one transaction on a pooled connection: no server-side prepared statements, no
session advisory lock, no LISTEN, no SET. perdure treats the main URL as pooled
as soon as a direct URL is given (``App(direct_url=...)``,
``PERDURE_DIRECT_DATABASE_URL``, ``perdure --direct-url``). Then:

- pooled connections never prepare statements (``prepare_threshold=None``);
- LISTEN, the maintenance lock, migrations and the migration lock use the
  direct URL, one connection at a time.

Without a direct URL the main URL is taken to be a direct connection to the
server (or a session-mode pooler) and used for everything.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from perdure.errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailable,
    PermissionDenied,
)
from perdure.store.loaders import ADAPTERS

#: The environment variable naming the direct (unpooled) URL.
DIRECT_URL_ENV = "PERDURE_DIRECT_DATABASE_URL"

#: The environment variable naming a read-only URL (a hot standby) for reads.
READ_URL_ENV = "PERDURE_READ_DATABASE_URL"


@dataclass(frozen=True)
class Endpoints:
    """The URLs one process uses: statements, session work and optional reads."""

    #: Where every statement goes (possibly through a transaction-mode pooler).
    url: str
    #: A direct connection to the primary, when ``url`` goes through a pooler.
    direct_url: str | None = None

    @property
    def pooled(self) -> bool:
        """Whether ``url`` goes through a transaction-mode pooler."""
        return self.direct_url is not None and self.direct_url != self.url

    @cached_property
    def session_url(self) -> str:
        """The URL for LISTEN, session advisory locks and migrations.

        A direct URL that does not say which server it wants gets
        ``target_session_attrs=read-write`` when ``url`` asks for the primary
        (see ``session_url``).
        """
        return session_url(self.url, self.direct_url)

    @cached_property
    def primary_only(self) -> bool:
        """Whether ``url`` asks for the primary (``target_session_attrs=read-write``).

        libpq checks it when it connects; the pools check it again each time
        they hand a connection out (see ``read_only_refused``), since a
        connection made to a primary can end up on a read-only server.
        """
        return wants_primary(self.url)

    def kwargs(self, name: str) -> dict[str, Any]:
        """psycopg connection arguments for a pooled-URL connection named ``name``."""
        # ADAPTERS: one unreadable value (an infinite time, an integer of
        # 5000 digits) fails neither the statement nor the others' rows.
        found: dict[str, Any] = {"autocommit": True, "application_name": name, "context": ADAPTERS}
        if self.pooled:
            # A prepared statement lives on one server connection; the next
            # transaction may run on another one.
            found["prepare_threshold"] = None
        return found


#: SQLSTATEs that say the server is going away, not yet back, or full, rather
#: than that the statement was wrong: admin_shutdown (pg_terminate_backend, a
#: fast shutdown), crash_shutdown, cannot_connect_now (starting up) and
#: too_many_connections. Class 08 (connection exceptions) counts as well.
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})

#: How the server refuses a connection's parameters (its FATAL message; libpq
#: gives such a refusal no SQLSTATE): no retry makes these work.
_REFUSALS = (
    "password authentication failed",
    "no pg_hba.conf entry",
    "does not exist",  # the database or the role
    "permission denied for database",
    "is not permitted to log in",
)


class ReadOnlyServer(psycopg.OperationalError):
    """A connection reached a server that does not accept writes (a standby)."""


def is_read_only(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is on a server that cannot write.

    ``read_only_sql_transaction`` (SQLSTATE 25006): a standby, a primary
    being demoted in a failover, or a server set read-only. Such a
    connection must be discarded; a new one (with
    ``target_session_attrs=read-write``) finds the primary.
    """
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction | ReadOnlyServer)


def reports_read_only(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server told ``conn`` that its session cannot write (no round trip).

    PostgreSQL 14 and later report ``in_hot_standby`` and
    ``default_transaction_read_only`` to the client at connect time and when
    they change: a connection that landed on a standby (through a pooler or a
    DNS name still pointing at the old primary) is known without a query.
    """
    info = conn.info
    return "on" in (
        info.parameter_status("in_hot_standby"),
        info.parameter_status("default_transaction_read_only"),
    )


def read_only_refused() -> ReadOnlyServer:
    """The error with which the pools refuse a connection on a read-only server.

    Their checks close such a connection (so that the pool replaces it,
    instead of taking it back and handing it out again) and raise this.
    """
    return ReadOnlyServer(
        "the server is read-only (a standby?): the connection is discarded; name the "
        "primary, or every host with target_session_attrs=read-write"
    )


def wants_primary(url: str) -> bool:
    """Whether ``url`` (or PGTARGETSESSIONATTRS) asks for a server that accepts writes."""
    try:
        given = conninfo_to_dict(url).get("target_session_attrs")
    except psycopg.ProgrammingError:
        return False
    attrs = given or os.environ.get("PGTARGETSESSIONATTRS")
    return attrs in ("read-write", "primary")


def session_url(url: str, direct_url: str | None) -> str:
    """The URL for session work: ``direct_url`` if given, else ``url``.

    When ``url`` asks for the primary and ``direct_url`` names no
    ``target_session_attrs`` of its own, the direct connections ask for the
    primary too: a listener or a lock holder must not stay on a standby
    after a failover.
    """
    if direct_url is None or direct_url == url:
        return url
    if not wants_primary(url) or wants_primary(direct_url):
        return direct_url
    with contextlib.suppress(psycopg.ProgrammingError):
        if "target_session_attrs" in conninfo_to_dict(direct_url):
            return direct_url
    if "://" not in direct_url:  # key=value form
        return f"{direct_url} target_session_attrs=read-write"
    return f"{direct_url}{'&' if '?' in direct_url else '?'}target_session_attrs=read-write"


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached, not that a statement failed.

    A lost or refused connection, a server shutting down or starting up, no
    free connection slot, no pooled connection within the pool's timeout, or
    a connection on a server that cannot write (see ``is_read_only``):
    in a failover each is over once a new primary is reached. An error that
    the server raised for the statement itself (a constraint, a deadlock, a
    serialization failure) is not.
    """
    if isinstance(exc, PoolTimeout) or is_read_only(exc):
        return True
    if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    state = exc.sqlstate
    if state is None:
        # No SQLSTATE: libpq itself failed (connection refused, closed
        # mid-query), unless the server refused the connection's parameters.
        return not is_refused(exc)
    return state.startswith("08") or state in _UNAVAILABLE_STATES


#: SQLSTATEs of the database's own faults, which no statement of the user's
#: caused and which pass once the server is whole again: disk full, out of
#: memory and other insufficient resources (class 53), operator intervention
#: (class 57: a shutdown, a crash, a server starting up), system errors (class
#: 58: an I/O error, a missing file), and the transaction conflicts the server
#: resolves by giving up one transaction (a serialization failure, a deadlock,
#: a commit whose outcome is unknown).
_FAULT_CLASSES = ("53", "57", "58")
_FAULT_STATES = frozenset({"40001", "40P01", "40003"})
#: query_canceled (class 57) is the user's statement_timeout or a user's
#: cancel: the statement's own doing, which would fail again on every retry.
_NOT_FAULTS = frozenset({"57014"})


def is_database_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a fault of the database, not a failure of the work that met it.

    The one place that says so, for the engine and the App alike: everything
    ``is_unavailable`` names (a lost or refused connection, a server going
    away, a read-only server), a full disk or other exhausted resource (class
    53), an operator's or the system's intervention (classes 57 and 58, but
    not a statement timeout), and a serialization failure, deadlock or
    commit of unknown outcome (40001, 40P01, 40003). Inside
    ``ctx.transaction`` the user's SQL and the checkpoint share a
    transaction: such an error there is still the database's fault, whereas a
    constraint the user's statement violated is the user's.

    A row that cannot be decoded is neither: it is the row's fault, and not
    judged here.
    """
    if is_unavailable(exc):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None or state in _NOT_FAULTS:
        return False
    return state in _FAULT_STATES or state.startswith(_FAULT_CLASSES)


#: The driver's base error class, for the App's boundary to catch without naming the driver.
DriverError = psycopg.Error


def refusal(exc: psycopg.Error) -> DatabaseError:
    """The typed error a client gets for a driver error that is not a database fault:
    ``PermissionDenied`` for a missing privilege, ``DatabaseError`` otherwise, each
    with the server's words and its SQLSTATE."""
    state = exc.sqlstate
    words = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if state == "42501":
        return PermissionDenied(
            f"PermissionDenied: {words} (the role lacks a privilege this call needs: "
            "grant it with perdure migrate --grant-client/--grant-reader/--grant-to, "
            "see docs/security.md)",
            state,
        )
    return DatabaseError(f"DatabaseError: {words} (SQLSTATE {state})", state)


def fault_message(exc: BaseException) -> str:
    """What a client is told of the database fault ``exc``: the kind, then the server's words."""
    state = getattr(exc, "sqlstate", None) or ""
    if is_read_only(exc):
        kind = "PostgreSQL is read-only"
    elif state.startswith("53"):
        kind = "PostgreSQL is out of resources"
    elif state.startswith("40"):
        kind = "PostgreSQL gave up the transaction"
    elif state.startswith("58"):
        kind = "PostgreSQL failed"
    else:
        kind = "PostgreSQL is unreachable"
    # The server's primary message, without the CONTEXT of a perdure function.
    diag = getattr(exc, "diag", None)
    said = getattr(diag, "message_primary", None) if diag is not None else None
    return f"{kind}: {said or exc}"


def is_refused(exc: BaseException) -> bool:
    """Whether the server refused the connection itself: a wrong password, database or role."""
    message = str(exc)
    return "FATAL" in message and any(refusal in message for refusal in _REFUSALS)


def check_url(url: str, source: str = "the database URL") -> str:
    """``url`` if libpq can parse it; else ConfigurationError naming ``source``, on one line.

    A URL (``postgresql://user@host:5432/db``) or a ``key=value`` conninfo
    string is accepted. The message never repeats a password.
    """
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        reason = " ".join(str(exc).split())
        shown = _hide_password(url)
        if shown != url:
            reason = reason.replace(url, shown)
        raise ConfigurationError(
            f"{source} {shown!r} is not a PostgreSQL URL (postgresql://user@host:5432/dbname) "
            f"or key=value conninfo: {reason}"
        ) from None
    return url


def _hide_password(url: str) -> str:
    """``url`` with what follows ``user:`` or ``password=`` replaced by ``***``."""
    url = re.sub(r"(password=)[^&\s]*", r"\1***", url, flags=re.IGNORECASE)
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def connect(url: str, **options: Any) -> psycopg.Connection[Any]:
    """A connection of its own to ``url``; DatabaseUnavailable when the server cannot be reached.

    For the short sessions outside the pools: migrations, the schema check.
    A server that refuses the connection (a wrong password, an unknown
    database or role) raises ConfigurationError with the server's reason.
    """
    check_url(url)
    try:
        return psycopg.connect(url, **{"context": ADAPTERS, **options})
    except psycopg.OperationalError as exc:
        if is_refused(exc):
            reason = str(exc).split("FATAL:", 1)[-1].strip()
            raise ConfigurationError(f"PostgreSQL refused the connection: {reason}") from exc
        if is_database_fault(exc):
            raise DatabaseUnavailable(f"cannot reach PostgreSQL: {exc}") from exc
        raise


def direct_url_from_env(direct_url: str | None) -> str | None:
    """``direct_url`` if given, else ``PERDURE_DIRECT_DATABASE_URL`` (None when unset or empty)."""
    return direct_url or os.environ.get(DIRECT_URL_ENV) or None
