"""Least privilege: what a worker's database role needs, granted by the schema's owner.

Migrations create and alter tables, so they run as the role that owns the
schema. Workers, and Apps that start or signal runs, need only to read and
write rows: USAGE on the schema, SELECT/INSERT/UPDATE/DELETE on its tables
(SELECT alone on ``schema_migrations``, which they read to check the schema is
current; SELECT and INSERT alone on ``audit``, which is append-only), USAGE
on its sequences and EXECUTE on its functions. Default
privileges extend the same grants to tables that later migrations create, so
an upgrade by the owner does not lock the workers out.

Two narrower grants serve roles that run no worker (docs/security.md has the
matrix): a *client* (a web app, or code in another language) gets USAGE on the
schema and EXECUTE on the public SQL functions only (store/clients.py),
which run as the schema's owner and check every argument; it reads and writes
no table. A *reader* (a dashboard, analytics) gets USAGE and SELECT on the
tables, now and later, and executes no function.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from perdure.errors import ConfigurationError, SchemaError
from perdure.store import migrate as migrations
from perdure.store.clients import client_statements

_TABLES = sql.SQL("SELECT, INSERT, UPDATE, DELETE")

#: The kinds of grant ``grant`` gives, as named in ``perdure migrate``'s options.
KINDS = ("worker", "client", "reader")


def grant_statements(schema: str, role: str) -> list[sql.Composed]:
    """The statements that give ``role`` exactly what a worker needs in ``schema``."""
    names = {"schema": sql.Identifier(schema), "role": sql.Identifier(role), "dml": _TABLES}
    texts = [
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT {dml} ON ALL TABLES IN SCHEMA {schema} TO {role}",
        # Workers read the migration record; only the owner writes it.
        "REVOKE INSERT, UPDATE, DELETE ON {schema}.schema_migrations FROM {role}",
        # The audit record is append-only: workers add entries, never change them.
        "REVOKE UPDATE, DELETE, TRUNCATE ON {schema}.audit FROM {role}",
        "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT {dml} ON TABLES TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT EXECUTE ON FUNCTIONS TO {role}",
    ]
    return [sql.SQL(text).format(**names) for text in texts]


def reader_statements(schema: str, role: str) -> list[sql.Composed]:
    """The statements that let ``role`` read the tables of ``schema`` (now and later), only."""
    names = {"schema": sql.Identifier(schema), "role": sql.Identifier(role)}
    texts = [
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {role}",
    ]
    return [sql.SQL(text).format(**names) for text in texts]


_STATEMENTS = {
    "worker": grant_statements,
    "client": client_statements,
    "reader": reader_statements,
}


def grant_script(schema: str, role: str, kind: str = "worker") -> str:
    """The grants of ``kind`` as SQL text, one statement per line, for a DBA to review or run."""
    statements = _STATEMENTS[kind](schema, role)
    return "".join(f"{stmt.as_string(None)};\n" for stmt in statements)


def grant_worker(url: str, schema: str, role: str) -> None:
    """Grant ``role`` what a worker needs in ``schema`` (which must be current), in one transaction.

    Run it as the schema's owner, after ``perdure.store.migrate.migrate``.
    Granting twice is a no-op.
    """
    grant(url, schema, role, "worker")


def grant(url: str, schema: str, role: str, kind: str) -> None:
    """Give ``role`` the ``kind`` grant (worker, client or reader) in ``schema``, at once.

    Run it as the schema's owner, after ``perdure.store.migrate.migrate``
    (the schema must be current). Granting twice is a no-op.
    """
    if kind not in _STATEMENTS:
        raise ConfigurationError(f"unknown grant {kind!r}: use one of {', '.join(KINDS)}")
    if not isinstance(role, str) or not role or len(role) > 63 or "\x00" in role:
        raise ConfigurationError(f"invalid role name {role!r}")
    with psycopg.connect(url) as conn:
        # A GRANT by a role that does not own the objects only warns and grants
        # nothing, so ownership is checked first.
        owned = conn.execute(
            "SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace "
            "WHERE nspname = %s",
            (schema,),
        ).fetchone()
        if owned is None or not owned[0]:
            raise SchemaError(
                f"role {conn.info.user!r} does not own schema {schema!r}: "
                "run this as the schema's owner, after `perdure migrate`"
            )
        migrations.ensure_current(conn, schema)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            raise ConfigurationError(
                f"role {role!r} does not exist: create it first "
                f"(CREATE ROLE {sql.Identifier(role).as_string(conn)} LOGIN PASSWORD '...')"
            )
        for stmt in _STATEMENTS[kind](schema, role):
            conn.execute(stmt)
