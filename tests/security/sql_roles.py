"""Roles for the SQL surface's tests: a schema migrated by an owner, and grantees.

``sql_setup`` migrates a fresh schema as a non-superuser owner role (or, with
``superuser=True``, as the test server's superuser) and registers workflow
``w``; ``setup.role(kind)`` creates a login role with the worker, client or
reader grant (or none) and returns its connection URL. Role names are unique
per test (roles are cluster-wide); all are dropped after.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from perdure.store import migrate as migrations
from perdure.store import privileges


@dataclass
class SqlSetup:
    """A migrated schema, the role that owns it, and roles made for one test."""

    pg_url: str
    schema: str
    owner: str
    owner_url: str
    roles: list[str] = field(default_factory=list)

    def role(self, kind: str | None) -> tuple[str, str]:
        """A new login role with the ``kind`` grant (None: no grant); its name and URL."""
        name = f"perdure_{kind or 'nobody'}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        self.roles.append(name)
        if kind is not None:
            privileges.grant(self.owner_url, self.schema, name, kind)
        return name, make_conninfo(self.pg_url, user=name)

    def call(self, url: str, query: str, *params: object) -> list[tuple[object, ...]]:
        """Run ``query`` ({s} is the schema) as the role of ``url``; its rows."""
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(sql.SQL(query).format(s=sql.Identifier(self.schema)), params)
            return cur.fetchall() if cur.description else []


def make_setup(pg_url: str, schema: str, superuser: bool) -> Iterator[SqlSetup]:
    suffix = uuid.uuid4().hex[:8]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if not row or not row[0]:
            pytest.skip("the test server's user is not a superuser")
        owner = conn.info.user
        if not superuser:
            owner = f"perdure_owner_{suffix}"
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
            conn.execute(
                sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(conn.info.dbname), sql.Identifier(owner)
                )
            )
    owner_url = pg_url if superuser else make_conninfo(pg_url, user=owner)
    migrations.migrate(owner_url, schema)
    setup = SqlSetup(pg_url, schema, owner, owner_url)
    setup.call(owner_url, "INSERT INTO {s}.workflows (name, version, queue) VALUES ('w', 1, 'w')")
    try:
        yield setup
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
            for role in [*setup.roles, *([] if superuser else [owner])]:
                ident = sql.Identifier(role)
                conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
                conn.execute(sql.SQL("DROP ROLE {}").format(ident))
