"""The command line refuses a misspelt schema and a malformed URL, and writes nothing.

A read command (``runs list``, ``runs show``, ``queues list``…) never creates or
migrates a schema: a ``--schema`` naming none is an error on one line that
lists the perdure schemas the database has. ``perdure dashboard`` and
``perdure api`` create their schema only on a database that has none. A
malformed URL, from an option or from the environment, is one
ConfigurationError line, with no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import psycopg
import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli
from perdure.store import migrate


def schema_exists(pg_url: str, name: str) -> bool:
    """Whether the database has a schema called ``name``."""
    with psycopg.connect(pg_url) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))
        return found.fetchone() is not None


@pytest.fixture
def misspelt(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run ``perdure`` on a schema named like the test's own, one letter short.

    The test's schema is migrated, so the database has a perdure schema to list.
    """
    migrate.migrate(pg_url, schema)
    typo = schema[:-1]
    assert not schema_exists(pg_url, typo)

    def run(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--database-url", pg_url, "--schema", typo, *args])

    return run


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "list"),
        ("runs", "show", "some-key"),
        ("queues", "list"),
        ("schedules", "list"),
        ("workflows", "list"),
        ("runs", "signal", "some-key", "approved"),
        ("runs", "cancel", "some-key"),
        # Servers: refused before they bind (pytest-timeout ends a server that is not).
        ("dashboard", "--port", "0"),
        ("api", "--port", "0"),
    ],
    ids=lambda command: " ".join(command),
)
def test_a_misspelt_schema_is_refused_and_not_created(
    misspelt: Callable[..., Result], pg_url: str, schema: str, command: tuple[str, ...]
) -> None:
    done = misspelt(*command)
    assert done.exit_code == 1, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"schema {schema[:-1]!r}" in lines[0] and "does not exist" in lines[0]
    # The message names the schemas that do hold perdure's tables.
    assert "perdure schemas in this database:" in lines[0] and schema in lines[0]
    assert done.stdout == ""
    assert not schema_exists(pg_url, schema[:-1])


def test_an_apps_reads_never_create_its_schema(pg_url: str, schema: str) -> None:
    with perdure.App(pg_url, schema=schema) as app:
        with pytest.raises(perdure.SchemaError, match="does not exist"):
            app.list_runs()
        with pytest.raises(perdure.SchemaError, match="does not exist"):
            app.queues()
        assert not schema_exists(pg_url, schema)


def test_an_apps_first_write_still_migrates_with_auto_migrate(pg_url: str, schema: str) -> None:
    with perdure.App(pg_url, schema=schema) as app:

        @app.workflow("noop")
        def noop(ctx: perdure.SyncContext, input: None) -> None:
            return None

        app.start("noop", None, key="first")
        assert schema_exists(pg_url, schema)
        assert [run.key for run in app.list_runs()] == ["first"]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["runs", "list"], {"PERDURE_DATABASE_URL": "postgres:/bad"}),
        (["--database-url", "postgres:/bad", "runs", "list"], {}),
        (["--database-url", "postgresql://u:hunter2@/db", "--read-url", "x:y", "runs", "list"], {}),
        (["--direct-url", "nonsense", "migrate"], {"PERDURE_DATABASE_URL": "dbname=x"}),
        (["dashboard", "--database-url", "postgres:/bad"], {}),
    ],
    ids=["env", "option", "read-url", "direct-url", "dashboard"],
)
def test_a_malformed_url_is_one_line_without_traceback(
    args: list[str], env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "perdure", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_environ(), **env},
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ConfigurationError: ")
    assert "is not a PostgreSQL URL" in lines[0]
    assert "Traceback" not in done.stderr and "psycopg" not in done.stderr
    assert "hunter2" not in done.stderr
    assert done.stdout == ""


def _environ() -> dict[str, str]:
    """This process's environment without perdure's own variables."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PERDURE_")}
