"""``perdure api``: serve the HTTP JSON API alone (docs/any-language.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.cli.dashboard import dashboard_options, make_config
from perdure.cli.render import safe_url
from perdure.cli.state import checked_url
from perdure.dashboard import serve
from perdure.dashboard.api import PREFIX, create_standalone

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command("api")
@dashboard_options
@click.option(
    "--database-url",
    default=None,
    callback=checked_url,
    help="PostgreSQL URL (overrides the global option).",
)
@click.option("--schema", default=None, help="perdure's schema (overrides the global option).")
@click.pass_obj
def http_api(
    state: CliState,
    port: int,
    host: str,
    token: str | None,
    read_only: bool,
    database_url: str | None,
    schema: str | None,
) -> None:
    """Serve the HTTP JSON API under /api/v1, without the dashboard's pages.

    The same guards as `perdure dashboard`: 127.0.0.1 by default, and beyond
    loopback a token (--token or PERDURE_DASHBOARD_TOKEN) that every call
    sends as Authorization: Bearer.
    """
    config = make_config(host, port, token, read_only)
    with state.server(database_url, schema) as app:

        def announce(url: str) -> None:
            required = ", token required" if config.auth_required else ""
            click.echo(
                f"perdure api: {url.rstrip('/')}{PREFIX}/  (schema {app.schema} on "
                f"{safe_url(app.url)}{required}; Ctrl-C stops it)"
            )

        serve(app, config, ready=announce, factory=create_standalone)
