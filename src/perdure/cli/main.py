"""The ``perdure`` command group and what every command shares.

Global options: ``--database-url`` (or ``PERDURE_DATABASE_URL``; default: the
embedded server) and ``--schema`` (or ``PERDURE_SCHEMA``; default ``perdure``).
Commands that take an application (``perdure worker myapp:app``) import it
and point it at the database and schema given here.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import click

from perdure.api.app import App
from perdure.cli.render import safe_url
from perdure.errors import PerdureError


@dataclass
class CliState:
    """The global options, shared by every subcommand through ``click.Context.obj``."""

    url: str | None
    schema: str | None
    #: A direct URL to the primary when ``url`` goes through a pooler.
    direct_url: str | None = None
    #: A hot standby's URL for read-only commands.
    read_url: str | None = None

    def app(self, target: str | None = None) -> App:
        """The App named by ``target`` (``module:attr``), or a bare App, configured."""
        if target is None:
            return App(self.url, schema=self.schema, direct_url=self.direct_url)
        app = load_app(target)
        app.configure(url=self.url, schema=self.schema, direct_url=self.direct_url)
        return app

    def reader(self) -> App:
        """An App for read-only commands: on ``--read-url`` when given, else as :meth:`app`."""
        if self.read_url is None:
            return self.app()
        return App(self.read_url, schema=self.schema, auto_migrate=False)

    def note_lag(self) -> None:
        """With ``--read-url``, say on stderr how far the standby lags behind the primary."""
        if self.read_url is None:
            return
        from perdure.cli import render
        from perdure.store import replica

        lag = replica.replication_lag(self.read_url)
        where = "not a standby" if lag is None else f"{lag:.1f} s behind the primary"
        render.err_console().print(
            f"read from {safe_url(self.read_url)}: {where}", style="dim", soft_wrap=True
        )


def load_app(target: str) -> App:
    """Import ``module:attr`` (``attr`` defaults to ``app``) and return the App there."""
    module_name, _, attr = target.partition(":")
    if not module_name:
        raise click.BadParameter(f"{target!r} is not of the form module:app", param_hint="APP")
    if os.getcwd() not in sys.path:
        # Like `python -m`, find the user's module in the current folder.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    found = getattr(module, attr or "app", None)
    if not isinstance(found, App):
        raise click.BadParameter(
            f"{module_name}:{attr or 'app'} is not a perdure.App", param_hint="APP"
        )
    return found


class PerdureGroup(click.Group):
    """A click group that prints perdure errors as one clear line and exits 1."""

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
@click.version_option(package_name="perdure")
@click.pass_context
def cli(
    ctx: click.Context,
    database_url: str | None,
    schema: str | None,
    direct_url: str | None,
    read_url: str | None,
) -> None:
    """perdure: durable workflows on PostgreSQL."""
    ctx.obj = CliState(database_url, schema, direct_url, read_url)


def _register() -> None:
    from perdure.cli import (
        bench,
        dashboard,
        demo,
        embedded,
        http_api,
        manage,
        migrate,
        prune,
        queues,
        replay,
        runs,
        schedules,
        worker,
        workflows,
    )

    manage.attach(runs.runs)

    for command in (
        bench.bench,
        dashboard.dashboard,
        demo.demo,
        replay.check_replay_command,
        embedded.embedded,
        http_api.http_api,
        migrate.migrate,
        prune.prune,
        queues.queues,
        runs.runs,
        schedules.schedules,
        worker.worker,
        workflows.workflows,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    """Entry point of the ``perdure`` console script."""
    cli(prog_name="perdure")
