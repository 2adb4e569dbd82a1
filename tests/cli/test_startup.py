"""The ``perdure`` command imports only what the command it runs needs.

Each check runs the command in a fresh interpreter and reads ``sys.modules``
there, so that nothing this test process imported can hide a load.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from perdure.cli.main import COMMANDS, cli

#: Modules that neither ``perdure --help`` nor ``perdure runs list`` needs.
HEAVY = [
    "perdure.dashboard",
    "perdure.demo",
    "perdure.cli.bench",
    "perdure.cli.demo",
    "perdure.engine.worker",
    "perdure.engine.executor",
    "starlette",
    "uvicorn",
    "croniter",
]
#: Not needed to print the help either.
HEAVY_FOR_HELP = [*HEAVY, "perdure.api.app", "psycopg", "psycopg_pool", "rich"]

PROBE = """
import json, sys
from perdure.cli.main import cli
try:
    cli(sys.argv[1:], prog_name="perdure")
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps(sorted(sys.modules)))
"""


def loaded(*argv: str) -> set[str]:
    """The modules loaded by a fresh interpreter that ran ``perdure *argv``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def heavy_in(modules: set[str], heavy: list[str]) -> list[str]:
    """Those of ``heavy`` (or their submodules) among ``modules``."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


def test_help_loads_no_command_and_no_database_driver() -> None:
    modules = loaded("--help")
    assert "click" in modules  # the probe did run the command
    assert heavy_in(modules, HEAVY_FOR_HELP) == []


def test_runs_list_loads_neither_the_dashboard_nor_the_worker(pg_url: str, schema: str) -> None:
    from perdure.store import migrate

    migrate.migrate(pg_url, schema)  # a read command never creates the schema
    modules = loaded("--database-url", pg_url, "--schema", schema, "runs", "list")
    assert "perdure.api.app" in modules  # it did read the runs
    assert heavy_in(modules, HEAVY) == []


def test_the_help_lists_every_command_with_its_own_summary() -> None:
    ctx = click.Context(cli)
    for name, (_, summary) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(limit=1000) == summary


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_answers_its_help(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "perdure", name, "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: perdure " + name in result.stdout
