"""``perdure embedded``: the private PostgreSQL server used when no database URL is given."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.cli import render
from perdure.cli.options import json_option
from perdure.store import embedded as server

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.group()
def embedded() -> None:
    """Manage the embedded PostgreSQL server (the default database)."""


_OTHER_DATABASE = (
    "note: --database-url (or PERDURE_DATABASE_URL) is set, "
    "so perdure commands use that database, not this server"
)


def _note_other_database(state: CliState, err: bool = False) -> None:
    if state.url is not None:
        click.echo(_OTHER_DATABASE, err=err)


@embedded.command()
@json_option("Print {data_dir, created, running, url} as JSON.")
@click.pass_obj
def status(state: CliState, as_json: bool) -> None:
    """Say where the embedded server's data lives and whether it is running."""
    data_dir = server.default_data_dir()
    running = server.server_status(data_dir)
    initialised = (data_dir / "PG_VERSION").exists()
    if as_json:
        render.echo_json(
            {
                "data_dir": str(data_dir),
                "created": initialised,
                "running": running is not None,
                "url": None if running is None else running.url,
            }
        )
        return
    click.echo(f"data dir: {data_dir}{'' if initialised else ' (not created yet)'}")
    click.echo(f"running:  {'yes' if running else 'no'}")
    if running is not None:
        click.echo(f"url:      {running.url}")
    click.echo(server.removal_hint(data_dir))
    _note_other_database(state)


@embedded.command()
@json_option("Print {url, data_dir, created, started} as JSON.")
@click.pass_obj
def start(state: CliState, as_json: bool) -> None:
    """Start the embedded server if it is not running, and print its URL.

    The URL is the only line on stdout (the rest goes to stderr), so a script
    can take it: ``export PERDURE_DATABASE_URL=$(perdure embedded start)``.
    The server keeps running after the command: `perdure embedded stop`
    stops it.
    """
    running = server.ensure_server()
    if as_json:
        render.echo_json(
            {
                "url": running.url,
                "data_dir": str(running.data_dir),
                "created": running.created,
                "started": running.started,
            }
        )
        return
    if running.created:
        click.echo(f"created a PostgreSQL cluster in {running.data_dir}", err=True)
    state_word = "started" if running.started else "already running"
    click.echo(f"{state_word}; it keeps running until `perdure embedded stop`", err=True)
    click.echo(running.url)
    click.echo(server.removal_hint(running.data_dir), err=True)
    _note_other_database(state, err=True)


@embedded.command()
@json_option("Print {data_dir, stopped} as JSON.")
@click.pass_obj
def stop(state: CliState, as_json: bool) -> None:
    """Stop the embedded server (a fast shutdown: open connections are closed)."""
    data_dir = server.default_data_dir()
    stopped = server.stop_server(data_dir)
    if as_json:
        render.echo_json({"data_dir": str(data_dir), "stopped": stopped})
        return
    if stopped:
        click.echo(f"stopped PostgreSQL in {data_dir}")
    else:
        click.echo(f"PostgreSQL in {data_dir} is not running")
    _note_other_database(state)
