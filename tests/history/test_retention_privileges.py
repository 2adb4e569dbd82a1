"""A worker role without DDL rights still creates and drops history partitions.

The partition functions are SECURITY DEFINER: they run as the schema's owner,
and only roles granted EXECUTE (`perdure migrate --grant-to`) may call them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

import perdure
from security.test_least_privilege import Roles, create_roles, migrate_as_owner

pytestmark = pytest.mark.all_servers


@pytest.fixture
def roles(pg_url: str, schema: str) -> Iterator[Roles]:
    yield from create_roles(pg_url, schema)


def test_a_restricted_worker_role_maintains_history_partitions(roles: Roles, schema: str) -> None:
    migrate_as_owner(roles, schema)
    s = sql.Identifier(schema)
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        owner.execute(
            sql.SQL("SELECT {}.history_partitions_ensure(now() - interval '40 days', 0)").format(s)
        )
    with perdure.App(roles.worker_url, schema=schema) as app:
        result = app.prune(timedelta(days=30))
        assert len(result.partitions) == 1 and not result.postponed
    with psycopg.connect(roles.worker_url, autocommit=True) as worker:
        (made,) = worker.execute(
            sql.SQL("SELECT {}.history_partitions_ensure(now() + interval '9 days', 0)").format(s)
        ).fetchone()  # type: ignore[misc]
        assert made == 1
        # Still no DDL of its own.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute(sql.SQL("DROP TABLE {}.history_default").format(s))


def test_roles_without_the_grant_may_not_call_them(roles: Roles, schema: str, pg_url: str) -> None:
    migrate_as_owner(roles, schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(
                sql.Identifier(schema), sql.Identifier(roles.worker)
            )
        )
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(roles.worker)
            )
        )
        conn.execute(
            sql.SQL("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {} FROM {}").format(
                sql.Identifier(schema), sql.Identifier(roles.worker)
            )
        )
    with (
        psycopg.connect(roles.worker_url, autocommit=True) as worker,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        worker.execute(
            sql.SQL("SELECT {}.history_partition_drop(now())").format(sql.Identifier(schema))
        )
