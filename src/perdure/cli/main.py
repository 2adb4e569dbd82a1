"""The ``perdure`` command group and what every command shares.

Global options: ``--database-url`` (or ``PERDURE_DATABASE_URL``; default: the
embedded server), ``--schema`` (or ``PERDURE_SCHEMA``; default ``perdure``) and
``--json``, before the subcommand or after it (see ``perdure.cli.options``).
Commands that take an application (``perdure worker myapp:app``) import it
and point it at the database and schema given here.

Each command's module is imported only when that command runs: ``perdure
--help`` or ``perdure runs list`` does not pay for the dashboard, the demo or
the worker. The group's help lists the commands from ``COMMANDS`` without
importing them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import click

from perdure.cli import audited
from perdure.cli.options import hoist
from perdure.cli.state import CliState
from perdure.errors import PerdureError

if TYPE_CHECKING:
    pass

#: Every command: its name, where it lives (module:attribute) and its one-line help.
COMMANDS: dict[str, tuple[str, str]] = {
    "api": (
        "perdure.cli.http_api:http_api",
        "Serve the HTTP JSON API under /api/v1, without the dashboard's pages.",
    ),
    "audit": (
        "perdure.cli.audit:audit",
        "See who did what: the audit record of the dashboard, the API and the CLI.",
    ),
    "bench": (
        "perdure.cli.bench:bench",
        "Measure perdure against pgbench and its peers on one PostgreSQL server.",
    ),
    "check-replay": (
        "perdure.cli.replay:check_replay_command",
        "Replay in-flight runs against the workflow code of APP, with no side effects.",
    ),
    "dashboard": (
        "perdure.cli.dashboard:dashboard",
        "Serve the web dashboard: runs, steps, timelines, queues, workers, actions.",
    ),
    "demo": (
        "perdure.cli.demo:demo",
        "Watch durable workflows survive a worker killed mid-flight.",
    ),
    "embedded": (
        "perdure.cli.embedded:embedded",
        "Manage the embedded PostgreSQL server (the default database).",
    ),
    "events": (
        "perdure.cli.events:events",
        "Emit application events and list the latest, with the runs each woke or started.",
    ),
    "keys": (
        "perdure.cli.keys:keys",
        "Make payload encryption keys (PERDURE_ENCRYPTION_KEYS).",
    ),
    "migrate": (
        "perdure.cli.migrate:migrate",
        "Apply the schema migrations this version of perdure ships (applying twice is a no-op).",
    ),
    "prune": (
        "perdure.cli.prune:prune",
        "Delete (or --archive) finished runs with their steps, tasks, history and signals.",
    ),
    "queues": ("perdure.cli.queues:queues", "See queues and change their limits."),
    "runs": ("perdure.cli.runs:runs", "Inspect runs and act on them (by id or by key)."),
    "schedules": (
        "perdure.cli.schedules:schedules",
        "See schedules and their next tick; pause, resume or trigger them.",
    ),
    "worker": (
        "perdure.cli.worker:worker",
        "Run a worker for the workflows of APP (module:attr, e.g. myapp:app).",
    ),
    "workflows": ("perdure.cli.workflows:workflows", "Inspect registered workflows."),
}


class PerdureGroup(click.Group):
    """The ``perdure`` group: commands imported on first use; perdure errors as one line.

    A PerdureError becomes ``Error: <message>`` and exit code 1.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, without importing any."""
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name``, importing its module now."""
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return self.commands.get(cmd_name)
        module_name, _, attr = COMMANDS[cmd_name][0].partition(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        if cmd_name == "runs":
            from perdure.cli import manage, move_version, run_logs, run_start, run_updates

            manage.attach(command)  # type: ignore[arg-type]
            command.add_command(move_version.move_version)  # type: ignore[attr-defined]
            run_start.attach(command)  # type: ignore[arg-type]
            run_logs.attach(command)  # type: ignore[arg-type]
            run_updates.attach(command)  # type: ignore[arg-type]
        audited.attach(cmd_name, command)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with their one-line help, importing none of them."""
        rows = [
            (
                name,
                self.commands[name]
                if name in self.commands
                else click.Command(name, help=COMMANDS[name][1]),
            )
            for name in self.list_commands(ctx)
        ]
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl(
                [(name, command.get_short_help_str(limit)) for name, command in rows]
            )

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse, with the global options given after the subcommand moved before it."""
        if not ctx.resilient_parsing:
            args = hoist(self, ctx, list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; a PerdureError becomes ``Error: <message>`` and exit code 1."""
        try:
            return super().invoke(ctx)
        except PerdureError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=PerdureGroup)
@click.option(
    "--database-url",
    envvar="PERDURE_DATABASE_URL",
    default=None,
    help="PostgreSQL URL (default: PERDURE_DATABASE_URL, else the embedded server).",
)
@click.option(
    "--schema",
    envvar="PERDURE_SCHEMA",
    default=None,
    help="Schema holding perdure's tables (default: perdure).",
)
@click.option(
    "--direct-url",
    envvar="PERDURE_DIRECT_DATABASE_URL",
    default=None,
    help="Direct URL to the primary when --database-url goes through a transaction-mode "
    "pooler (migrations, LISTEN, session locks).",
)
@click.option(
    "--read-url",
    envvar="PERDURE_READ_DATABASE_URL",
    default=None,
    help="A hot standby for read-only commands (runs list, status, the dashboard's pages).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON, and nothing else, as the command's own --json does.",
)
@click.option(
    "--as",
    "actor",
    envvar="PERDURE_ACTOR",
    default=None,
    metavar="NAME",
    help="Who acts, as the audit record names them (default: PERDURE_ACTOR, else the OS user).",
)
@click.version_option(package_name="perdure")
@click.pass_context
def cli(
    ctx: click.Context,
    database_url: str | None,
    schema: str | None,
    direct_url: str | None,
    read_url: str | None,
    as_json: bool,
    actor: str | None,
) -> None:
    """perdure: durable workflows on PostgreSQL.

    The global options may also follow the command: `perdure runs list
    --schema shop --json` is `perdure --schema shop --json runs list`.
    """
    ctx.obj = CliState(database_url, schema, direct_url, read_url, as_json, actor)


def main() -> None:
    """Entry point of the ``perdure`` console script."""
    cli(prog_name="perdure")
