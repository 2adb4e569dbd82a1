"""``perdure dashboard``: serve the web dashboard over the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from perdure.api.app import App
from perdure.cli.render import safe_url
from perdure.cli.state import checked_url
from perdure.dashboard import DashboardConfig, serve
from perdure.dashboard.config import TOKEN_ENV

if TYPE_CHECKING:
    from perdure.cli.state import CliState


F = TypeVar("F", bound=Callable[..., Any])


def dashboard_options(command: F) -> F:
    """The options ``perdure dashboard`` and ``perdure demo --serve`` share."""
    for option in reversed(
        [
            click.option(
                "--port",
                type=click.IntRange(0, 65535),
                default=8080,
                show_default=True,
                help="TCP port to listen on.",
            ),
            click.option(
                "--host",
                default="127.0.0.1",
                show_default=True,
                help="Address to listen on; beyond loopback a token is required.",
            ),
            click.option(
                "--token",
                default=None,
                metavar="TOKEN",
                help=f"Require this token (Bearer header or login form); default: ${TOKEN_ENV}.",
            ),
            click.option("--read-only", is_flag=True, help="Hide and refuse every action."),
        ]
    ):
        command = option(command)
    return command


def make_config(host: str, port: int, token: str | None, read_only: bool) -> DashboardConfig:
    """The dashboard's settings from the command's options (token from the environment)."""
    return DashboardConfig.from_options(host=host, port=port, token=token, read_only=read_only)


def announce(app: App, config: DashboardConfig) -> None:
    """Say where the dashboard is, and which database it shows."""
    click.echo(
        f"perdure dashboard: {config.url}  (schema {app.schema} on {safe_url(app.url)}"
        f"{', read-only' if config.read_only else ''}{', token required' if config.token else ''};"
        " Ctrl-C stops it)"
    )


@click.command("dashboard")
@dashboard_options
@click.option(
    "--database-url",
    default=None,
    callback=checked_url,
    help="PostgreSQL URL (overrides the global option).",
)
@click.option("--schema", default=None, help="perdure's schema (overrides the global option).")
@click.option(
    "--read-url",
    default=None,
    callback=checked_url,
    help="Read pages from this hot standby (overrides the global option); actions go to the "
    "primary, and the header shows the standby's lag.",
)
@click.pass_obj
def dashboard(
    state: CliState,
    port: int,
    host: str,
    token: str | None,
    read_only: bool,
    database_url: str | None,
    schema: str | None,
    read_url: str | None,
) -> None:
    """Serve the web dashboard: runs, steps, timelines, queues, workers, actions.

    Binds to 127.0.0.1 by default. With another --host it refuses to start
    unless a token is given (--token or PERDURE_DASHBOARD_TOKEN).
    """
    config = make_config(host, port, token, read_only)
    read_url = read_url or state.read_url
    schema = schema or state.schema
    with state.server(database_url, schema) as app:
        if read_url is None:
            serve(app, config, ready=lambda url: announce(app, config))
            return
        with App(read_url, schema=schema, auto_migrate=False) as reader:
            serve(app, config, ready=lambda url: announce(app, config), reader=reader)
