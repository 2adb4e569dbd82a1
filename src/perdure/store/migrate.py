"""Apply the numbered SQL migrations shipped in ``sql/migrations``.

Migrations are taken in order under a session advisory lock, each in its own
transaction that also records its version, so two processes migrating at once
serialise and applying twice is a no-op. A schema one version newer than this
code is used (the rolling-deploy rule, see ``perdure.store.versions``); a
newer one is refused.
"""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass
from importlib import resources
from itertools import pairwise

import psycopg
from psycopg import sql

from perdure.errors import SchemaError
from perdure.store import clients
from perdure.store.connect import connect

log = logging.getLogger("perdure.migrate")

#: How many schema versions ahead of its own this code accepts (the rolling-deploy
#: rule of ``perdure.store.versions``).
SCHEMA_AHEAD = 1

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
MIN_SERVER_VERSION = 140000
#: The first migration after which every function's search_path is pinned
#: (see ``pin_functions``).
PINNED_FROM = 17
#: The newest major version perdure supports (newer ones are not refused).
MAX_SUPPORTED_VERSION = 180000


@dataclass(frozen=True)
class Migration:
    """One numbered migration file."""

    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    """The migrations shipped with this code, in version order."""
    folder = resources.files("perdure.store") / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: (m.version, m.name))
    for first, second in pairwise(found):
        if first.version == second.version:
            # Two branches that each added a migration: one must be renumbered.
            raise SchemaError(
                f"two migrations are numbered {first.version:04d}: "
                f"{first.version:04d}_{first.name}.sql and {second.version:04d}_{second.name}.sql"
            )
    for index, migration in enumerate(found, start=1):
        if migration.version != index:
            raise SchemaError(f"migration numbers must be contiguous; {index:04d} is missing")
    return found


def latest(migrations: list[Migration]) -> int:
    """The highest version among ``migrations`` (0 if none)."""
    return migrations[-1].version if migrations else 0


def _lock_key(schema: str) -> int:
    # A stable 63-bit key per schema, so migrations of different schemas in one
    # database do not wait on each other.
    return zlib.crc32(f"perdure.migrate:{schema}".encode()) & 0x7FFFFFFF


def current_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """The highest migration version recorded in ``schema`` (0 if none)."""
    table = sql.Identifier(schema, "schema_migrations").as_string(conn)
    try:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if not row or not row[0]:
            return 0
        query = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_migrations").format(
            sql.Identifier(schema)
        )
        result = conn.execute(query).fetchone()
    except psycopg.errors.InsufficientPrivilege as exc:
        user = conn.info.user
        raise SchemaError(
            f"role {user!r} may not read schema {schema!r} ({exc.diag.message_primary}): "
            f"its owner grants access with `perdure migrate --grant-to {user}`"
        ) from None
    return int(str(result[0])) if result else 0


def check_version(version: int) -> int:
    """Refuse a server version number (``server_version_num``) older than PostgreSQL 14."""
    if version < MIN_SERVER_VERSION:
        # From version 10 on the number is major * 10000 + minor; before, 9.6.24 is 90624.
        shown = (
            f"{version // 10000}.{version % 10000}"
            if version >= 100000
            else f"{version // 10000}.{version // 100 % 100}.{version % 100}"
        )
        raise SchemaError(
            f"PostgreSQL {shown} is not supported: perdure needs PostgreSQL 14 or newer "
            f"(supported: 14 to {MAX_SUPPORTED_VERSION // 10000}); upgrade the server"
        )
    return version


def check_server(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Refuse servers older than PostgreSQL 14; return the server version number."""
    return check_version(conn.info.server_version)


def migrate(url: str, schema: str, upto: int | None = None) -> list[int]:
    """Bring ``schema`` up to date (or up to version ``upto``); the versions applied.

    A schema that is already current is only read: no lock is taken and no DDL
    runs, so a role with no right to create or alter tables (a restricted
    worker, see ``perdure.store.privileges``) may call it. When there is
    something to apply and the role may not, SchemaError says so.
    """
    migrations = available()
    target = latest(migrations) if upto is None else min(upto, latest(migrations))
    with connect(url, autocommit=True) as conn:
        check_server(conn)
        try:
            if _check_newer(conn, schema, latest(migrations)) >= target:
                return []
            return _apply(conn, schema, migrations, upto)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SchemaError(
                f"role {conn.info.user!r} may not migrate schema {schema!r} "
                f"({exc.diag.message_primary}): run `perdure migrate` as the schema's owner "
                "(and `perdure migrate --grant-to ROLE` for a restricted worker role)"
            ) from None


def _check_newer(conn: psycopg.Connection[tuple[object, ...]], schema: str, known: int) -> int:
    """The schema's version, refused if it is newer than this code runs on."""
    have = current_version(conn, schema)
    if have > known + SCHEMA_AHEAD:
        raise SchemaError(
            f"schema {schema!r} is at version {have}, newer than this code knows "
            f"({known}): upgrade perdure before running it on this database"
        )
    return have


def _apply(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    migrations: list[Migration],
    upto: int | None,
) -> list[int]:
    applied: list[int] = []
    key = _lock_key(schema)
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        # Read again under the lock: another process may have migrated meanwhile.
        have = _check_newer(conn, schema, latest(migrations))
        for migration in migrations:
            if migration.version <= have or (upto is not None and migration.version > upto):
                continue
            with conn.transaction():
                # The schema first, so that what a migration creates lands in
                # it; pg_temp last, so that no temporary table stands in for
                # one of the schema's.
                conn.execute(
                    sql.SQL("SET LOCAL search_path TO {}, pg_catalog, pg_temp").format(ident)
                )
                conn.execute(migration.sql.encode())
                if migration.version >= PINNED_FROM:
                    pin_functions(conn, schema)
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)"
                    ).format(ident),
                    (migration.version, migration.name),
                )
            applied.append(migration.version)
        if applied:
            clients.extend_clients(conn, schema)
            log.info(
                "applied migration %04d_%s to schema %s", migration.version, migration.name, schema
            )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return applied


def pin_functions(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Pin every function of ``schema`` to a safe search_path; take EXECUTE from PUBLIC.

    The path is ``pg_catalog, <schema>, pg_temp``: the temporary schema last,
    so that a caller's temporary table never stands in for one of the
    schema's inside a SECURITY DEFINER function (docs/security.md). Run after
    each migration from version ``PINNED_FROM`` on, so the functions later
    migrations create are pinned and kept from PUBLIC too. (ALTER DEFAULT
    PRIVILEGES cannot do the latter per schema: PUBLIC's EXECUTE is a global
    default, and revoking it globally would change every function the
    migrating role creates anywhere in the database.) Functions of the schema
    the migrating role does not own are left alone.
    """
    conn.execute(
        sql.SQL(
            "DO $pin$ DECLARE v_fn regprocedure; BEGIN "
            "FOR v_fn IN SELECT p.oid::regprocedure FROM pg_proc p "
            "WHERE p.pronamespace = {name}::regnamespace "
            "AND pg_has_role(current_user, p.proowner, 'MEMBER') LOOP "
            "EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', "
            "v_fn, {literal}); END LOOP; END $pin$"
        ).format(
            name=sql.Literal(sql.Identifier(schema).as_string(conn)), literal=sql.Literal(schema)
        )
    )
    conn.execute(
        sql.SQL("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {} FROM PUBLIC").format(
            sql.Identifier(schema)
        )
    )


def schema_exists(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> bool:
    """Whether a schema called ``schema`` exists."""
    found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    return found.fetchone() is not None


def drop_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Drop ``schema`` and everything in it, if it exists (tests and the demo's reset)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def perdure_schemas(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """The schemas of this database that hold a perdure ``schema_migrations`` table."""
    found = conn.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relname = 'schema_migrations' AND c.relkind IN ('r', 'p')"
        " AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid"
        "      AND a.attname IN ('version', 'name', 'applied_at') AND NOT a.attisdropped) = 3"
        " ORDER BY 1"
    )
    return [str(row[0]) for row in found.fetchall()]


def check_may_create(url: str, schema: str) -> None:
    """Refuse to create ``schema`` when the database already has other perdure schemas
    but not this one: a misspelt ``--schema`` (SchemaError listing those that exist).

    A database with no perdure schema at all, or with this one, passes: a
    server started first on a fresh database may create its schema.
    """
    with connect(url, autocommit=True) as conn:
        found = perdure_schemas(conn)
        if found and schema not in found:
            raise missing_schema(conn, schema)


def missing_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> SchemaError:
    """The error for ``schema`` holding no perdure tables, listing the schemas that do."""
    others = perdure_schemas(conn)
    where = (
        f"perdure schemas in this database: {', '.join(others)} "
        f"(or run `perdure migrate` to create {schema!r})"
        if others
        else "this database has no perdure schema yet: run `perdure migrate` to create it"
    )
    what = "holds no perdure tables" if schema_exists(conn, schema) else "does not exist"
    return SchemaError(f"schema {schema!r} is at version 0: it {what}; {where}")


def ensure_current(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Raise SchemaError unless the server is supported and this code runs on ``schema``.

    That is the code's own version or the next one (see ``perdure.store.versions``).
    A schema with no perdure tables at all is named as such, with the schemas
    of the database that have them.
    """
    check_server(conn)
    have = current_version(conn, schema)
    if have == 0:
        raise missing_schema(conn, schema)
    want = latest(available())
    if have < want:
        raise SchemaError(
            f"schema {schema!r} is at version {have} but this code needs {want}: "
            "run `perdure migrate` (or use App(..., auto_migrate=True))"
        )
    if have > want + SCHEMA_AHEAD:
        raise SchemaError(
            f"schema {schema!r} is at version {have}, newer than this code knows ({want}): "
            "upgrade perdure"
        )
