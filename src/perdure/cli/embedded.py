"""``perdure embedded``: the private PostgreSQL server used when no database URL is given."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.store import embedded as server

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.group()
def embedded() -> None:
    """Manage the embedded PostgreSQL server (the default database)."""


def _note_other_database(state: CliState) -> None:
    if state.url is not None:
        click.echo(
            "note: --database-url (or PERDURE_DATABASE_URL) is set, "
            "so perdure commands use that database, not this server"
        )


@embedded.command()
@click.pass_obj
def status(state: CliState) -> None:
    """Say where the embedded server's data lives and whether it is running."""
    data_dir = server.default_data_dir()
    running = server.server_status(data_dir)
    initialised = (data_dir / "PG_VERSION").exists()
    click.echo(f"data dir: {data_dir}{'' if initialised else ' (not created yet)'}")
    click.echo(f"running:  {'yes' if running else 'no'}")
    if running is not None:
        click.echo(f"url:      {running.url}")
    click.echo(server.removal_hint(data_dir))
    _note_other_database(state)


@embedded.command()
@click.pass_obj
def start(state: CliState) -> None:
    """Start the embedded server if it is not running, and print its URL."""
    running = server.ensure_server()
    if running.created:
        click.echo(f"created a PostgreSQL cluster in {running.data_dir}")
    click.echo(f"{'started' if running.started else 'already running'}: {running.url}")
    click.echo(server.removal_hint(running.data_dir))
    _note_other_database(state)


@embedded.command()
@click.pass_obj
def stop(state: CliState) -> None:
    """Stop the embedded server (a fast shutdown: open connections are closed)."""
    data_dir = server.default_data_dir()
    if server.stop_server(data_dir):
        click.echo(f"stopped PostgreSQL in {data_dir}")
    else:
        click.echo(f"PostgreSQL in {data_dir} is not running")
    _note_other_database(state)
