"""No role gains rights through perdure's SECURITY DEFINER functions.

A role with the worker grant and the default TEMP right makes temporary tables
named like the schema's (history_default, history, runs, tasks, signals) with
triggers calling a pg_temp function that tries to take the owner's rights:
make itself superuser, grant itself CREATE on the schema, write
schema_migrations and create a table in the schema. It then calls every
SECURITY DEFINER function. Each function's search_path puts pg_temp last, so
none of the triggers runs as the owner: the role gains nothing, whether the
schema was migrated by an owner role or by a superuser.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql
from sql_roles import SqlSetup

from migration_reading import Schema
from migration_reading import migrations as files
from perdure.store import migrate as migrations

TRAP = """
CREATE FUNCTION pg_temp.seize() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO pg_temp.fired VALUES (current_user);
    BEGIN EXECUTE format('ALTER ROLE %I SUPERUSER', {role}); EXCEPTION WHEN others THEN END;
    BEGIN EXECUTE format('GRANT CREATE ON SCHEMA %I TO %I', {schema}, {role});
    EXCEPTION WHEN others THEN END;
    BEGIN EXECUTE format('INSERT INTO %I.schema_migrations VALUES (999, ''seized'')', {schema});
    EXCEPTION WHEN others THEN END;
    BEGIN EXECUTE format('CREATE TABLE %I.seized (id int)', {schema});
    EXCEPTION WHEN others THEN END;
    RETURN NULL;
END
$f$;
"""


def trap(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, role: str, tables: list[str]
) -> None:
    """Temporary look-alikes of ``tables``, each with a trigger calling seize()."""
    if not tables or tables[0] == "history_default":
        conn.execute("CREATE TEMP TABLE fired (who text)")
        conn.execute(
            sql.SQL(TRAP).format(role=sql.Literal(role), schema=sql.Literal(schema)).as_string(conn)
        )
    for table in tables:
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {}.{})").format(
                sql.Identifier(table), sql.Identifier(schema), sql.Identifier(table)
            )
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER seize AFTER INSERT OR UPDATE OR DELETE ON pg_temp.{} "
                "FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.seize()"
            ).format(sql.Identifier(table))
        )


# The auditor's attack: only history_default is shadowed, so the old
# function ran to its end with the trigger's work committed.
PARTITIONS = [
    "SELECT {s}.history_partitions_ensure(now() + interval '20 days', 0)",
    "SELECT {s}.history_partitions_ensure(now() - interval '20 days', 2)",
    "SELECT {s}.history_partition_drop(now() - interval '10 days')",
]
CALLS = [
    "SELECT {s}.start_run('w', '{{\"n\": 1}}', p_key => 'k1')",
    "SELECT {s}.send_signal('k1', 'go', '1')",
    "SELECT * FROM {s}.run_status('k1')",
    "SELECT {s}.get_event('k1', 'e')",
    "SELECT * FROM {s}.read_stream('k1', 's')",
    "SELECT {s}.pause_run('k1')",
    "SELECT {s}.resume_run('k1')",
    "SELECT {s}.cancel_run('k1')",
]


@pytest.mark.parametrize("superuser", [False, True], ids=["owner-role", "superuser"])
def test_a_worker_role_gains_nothing_through_definer_functions(
    make_setup: Callable[[bool], SqlSetup], superuser: bool
) -> None:
    setup = make_setup(superuser)
    role, url = setup.role("worker")
    before = setup.call(setup.pg_url, "SELECT version, name FROM {s}.schema_migrations ORDER BY 1")
    with psycopg.connect(url, autocommit=True) as conn:
        trap(conn, setup.schema, role, ["history_default"])
        for call in PARTITIONS:
            conn.execute(sql.SQL(call).format(s=sql.Identifier(setup.schema)))
        trap(conn, setup.schema, role, ["history", "runs", "tasks", "signals", "workflows"])
        for call in CALLS:
            conn.execute(sql.SQL(call).format(s=sql.Identifier(setup.schema)))
        fired = conn.execute("SELECT who FROM pg_temp.fired").fetchall()
    assert fired == []
    [(is_super, may_create)] = setup.call(
        setup.pg_url,
        "SELECT rolsuper, has_schema_privilege(rolname, %s, 'CREATE') FROM pg_roles "
        "WHERE rolname = %s",
        setup.schema,
        role,
    )
    assert (is_super, may_create) == (False, False)
    after = setup.call(setup.pg_url, "SELECT version, name FROM {s}.schema_migrations ORDER BY 1")
    assert after == before
    seized = setup.call(setup.pg_url, "SELECT to_regclass(%s)", f"{setup.schema}.seized")
    assert seized == [(None,)]
    # The calls did their work in the schema's own tables.
    [(status,)] = setup.call(setup.pg_url, "SELECT status FROM {s}.runs WHERE key = 'k1'")
    assert status == "cancelled"


def _definer_paths(url: str, schema: str) -> dict[str, list[str]]:
    """Each SECURITY DEFINER function of ``schema`` and the search_path it runs with."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p "
            "WHERE p.pronamespace = %s::regnamespace AND p.prosecdef",
            (sql.Identifier(schema).as_string(conn),),
        ).fetchall()
    paths: dict[str, list[str]] = {}
    for name, config in rows:
        found = [
            c.removeprefix("search_path=") for c in config or [] if c.startswith("search_path=")
        ]
        paths[name] = [part.strip() for part in found[0].split(",")] if found else []
    return paths


def _unsafe(paths: dict[str, list[str]]) -> list[str]:
    """The definers whose path does not begin with pg_catalog and end with pg_temp."""
    return [
        f"{name}: {path}"
        for name, path in sorted(paths.items())
        if not path or path[0] != "pg_catalog" or path[-1] != "pg_temp"
    ]


def test_every_function_pins_a_safe_search_path_and_none_is_public(
    sql_setup: SqlSetup,
) -> None:
    rows = sql_setup.call(
        sql_setup.pg_url,
        "SELECT p.oid::regprocedure::text, p.proconfig, "
        "has_function_privilege('public', p.oid, 'EXECUTE') FROM pg_proc p "
        "WHERE p.pronamespace = %s::regnamespace",
        sql_setup.schema,
    )
    assert len(rows) > 20
    pinned = f"search_path=pg_catalog, {sql_setup.schema}, pg_temp"
    assert [name for name, config, _ in rows if pinned not in (config or [])] == []
    assert [name for name, _, public in rows if public] == []
    definers = _definer_paths(sql_setup.pg_url, sql_setup.schema)
    assert len(definers) >= 13
    assert _unsafe(definers) == []


def test_the_migration_files_alone_pin_every_definer(pg_url: str, schema: str) -> None:
    """Applied as plain SQL, with none of the migrator's pins after each file
    (another tool may apply them so, and an auditor reads them so), the
    migrations leave every definer with pg_catalog first and pg_temp last."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        for migration in migrations.available():
            with conn.transaction():
                conn.execute(
                    sql.SQL("SET LOCAL search_path TO {}, pg_catalog, pg_temp").format(ident)
                )
                conn.execute(migration.sql.encode())
    definers = _definer_paths(pg_url, schema)
    assert len(definers) >= 13
    assert _unsafe(definers) == []
    # The unit test's reading of the files (tests/unit/test_definer_pins.py)
    # finds the same functions and the same definers as the server made.
    read = Schema()
    for name, text in files():
        read.read(text, name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # Types of the schema (a row of runs) named as the files name them.
        conn.execute(sql.SQL("SET search_path TO {}, pg_catalog").format(sql.Identifier(schema)))
        made = conn.execute(
            "SELECT format('%%s(%%s)', p.proname, oidvectortypes(p.proargtypes)), p.prosecdef "
            "FROM pg_proc p WHERE p.pronamespace = %s::regnamespace",
            (sql.Identifier(schema).as_string(conn),),
        ).fetchall()
    assert sorted(made) == sorted((key, f.definer) for key, f in read.functions.items())
