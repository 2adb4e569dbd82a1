"""``perdure dashboard``: serve the web dashboard over the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from perdure.api.app import App
from perdure.cli.render import safe_url
from perdure.cli.state import checked_url
from perdure.dashboard import DashboardConfig, serve
from perdure.dashboard.config import (
    PROXIES_ENV,
    PROXY_DEFAULT_ENV,
    PROXY_GROUPS_ENV,
    PROXY_ROLES_ENV,
    PROXY_USER_ENV,
    TOKEN_ENV,
    TOKENS_ENV,
    TOKENS_FILE_ENV,
)
from perdure.dashboard.hooks_config import WEBHOOKS_ENV, WEBHOOKS_FILE_ENV
from perdure.dashboard.roles import ROLES

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
            _auth_option(
                "--tokens-file",
                metavar="PATH",
                help=f"Accept the tokens of this file: name:role:token lines, role one of "
                f"{', '.join(ROLES)}; default: ${TOKENS_FILE_ENV} (and ${TOKENS_ENV}).",
            ),
            _auth_option(
                "--trust-proxy",
                multiple=True,
                metavar="CIDR",
                help=f"Trust the user header of an authenticating proxy at these addresses "
                f"(repeatable); default: ${PROXIES_ENV}.",
            ),
            _auth_option(
                "--proxy-user-header",
                metavar="HEADER",
                help=f"The proxy's user header (default X-Forwarded-User, or ${PROXY_USER_ENV}).",
            ),
            _auth_option(
                "--proxy-groups-header",
                metavar="HEADER",
                help=f"The proxy's groups header, comma-separated (${PROXY_GROUPS_ENV}).",
            ),
            _auth_option(
                "--proxy-role",
                multiple=True,
                metavar="WHO=ROLE",
                help=f"A proxy user's (alice@x.org=admin) or group's (group:ops=operator) role, "
                f"repeatable; default: ${PROXY_ROLES_ENV}.",
            ),
            _auth_option(
                "--proxy-default-role",
                metavar="ROLE",
                help=f"The role of proxy users mapped to nothing (default viewer; none: refused; "
                f"${PROXY_DEFAULT_ENV}).",
            ),
            _auth_option(
                "--webhooks-file",
                metavar="PATH",
                help=f"Accept signed webhooks from the sources of this TOML (or .json) file "
                f"at /api/v1/webhooks/<source>; default: ${WEBHOOKS_FILE_ENV} "
                f"(and ${WEBHOOKS_ENV}).",
            ),
        ]
    ):
        command = option(command)
    return command


def _keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault("perdure.auth", {})[str(param.name)] = value
    return value


def _auth_option(*names: str, **kwargs: Any) -> Callable[[F], F]:
    """An option kept in the context for ``make_config``, not passed to the command."""
    return click.option(*names, default=None, expose_value=False, callback=_keep, **kwargs)


def make_config(host: str, port: int, token: str | None, read_only: bool) -> DashboardConfig:
    """The dashboard's settings from the command's options (defaults from the environment)."""
    ctx = click.get_current_context(silent=True)
    auth: dict[str, Any] = {} if ctx is None else ctx.meta.get("perdure.auth", {})
    return DashboardConfig.from_options(
        host=host,
        port=port,
        token=token,
        read_only=read_only,
        tokens_file=auth.get("tokens_file"),
        trusted_proxies=auth.get("trust_proxy") or (),
        proxy_user_header=auth.get("proxy_user_header"),
        proxy_groups_header=auth.get("proxy_groups_header"),
        proxy_roles=auth.get("proxy_role") or (),
        proxy_default_role=auth.get("proxy_default_role"),
        webhooks_file=auth.get("webhooks_file"),
    )


def announce(app: App, config: DashboardConfig) -> None:
    """Say where the dashboard is, and which database it shows."""
    click.echo(
        f"perdure dashboard: {config.url}  (schema {app.schema} on {safe_url(app.url)}"
        f"{', read-only' if config.read_only else ''}{_auth(config)};"
        " Ctrl-C stops it)"
    )


def _auth(config: DashboardConfig) -> str:
    """How callers are known, for the announcement."""
    said = ""
    if config.all_tokens:
        said += f", {len(config.all_tokens)} token(s)"
    if config.proxy is not None:
        said += f", proxy user header {config.proxy.user_header}"
    return said


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
