"""The dashboard's settings, and the rule that keeps it off the network without a token."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass

from perdure.dashboard import hooks_config
from perdure.dashboard.hooks_config import WebhookSource
from perdure.dashboard.roles import (
    MIN_TOKEN_LENGTH,
    NamedToken,
    ProxyAuth,
    check_role,
    parse_networks,
    parse_role_map,
    parse_tokens,
    read_tokens_file,
)
from perdure.errors import ConfigurationError

#: The environment variable that holds the dashboard's access token (an admin's).
TOKEN_ENV = "PERDURE_DASHBOARD_TOKEN"
#: Named tokens with roles: ``name:role:token`` entries, by line or comma.
TOKENS_ENV = "PERDURE_TOKENS"
#: A file of ``name:role:token`` lines.
TOKENS_FILE_ENV = "PERDURE_TOKENS_FILE"
#: The authenticating proxy's addresses (comma-separated CIDRs): its user header is trusted.
PROXIES_ENV = "PERDURE_TRUSTED_PROXIES"
#: The header naming the proxy's user (default X-Forwarded-User).
PROXY_USER_ENV = "PERDURE_PROXY_USER_HEADER"
#: The header listing the proxy user's groups, comma-separated (default: none read).
PROXY_GROUPS_ENV = "PERDURE_PROXY_GROUPS_HEADER"
#: Roles of proxy users and groups: ``user=role`` or ``group:name=role``, comma-separated.
PROXY_ROLES_ENV = "PERDURE_PROXY_ROLES"
#: The role of a proxy user mapped to nothing (default viewer; ``none``: refused).
PROXY_DEFAULT_ENV = "PERDURE_PROXY_DEFAULT_ROLE"
#: The name the single ``--token`` (or PERDURE_DASHBOARD_TOKEN) signs in as; its role is admin.
SINGLE_TOKEN_NAME = "admin"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class DashboardConfig:
    """How the dashboard is served.

    ``token``: required for every request when set (an ``Authorization:
    Bearer`` header, or the login form's cookie); it signs in as ``admin``.
    ``tokens``: more tokens, each with a name and a role (perdure.dashboard.roles).
    ``proxy``: trust an authenticating proxy's user header from its addresses.
    One of the three is mandatory when ``host`` is not a loopback address.
    ``read_only``: no action is shown or accepted. ``refresh_seconds``: how
    often live pages fetch fresh data (0: never). ``webhooks``: the sources
    whose signed deliveries ``POST /api/v1/webhooks/{source}`` accepts.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = 3.0
    tokens: tuple[NamedToken, ...] = ()
    proxy: ProxyAuth | None = None
    webhooks: tuple[WebhookSource, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ConfigurationError(f"host must be a host name or address, not {self.host!r}")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigurationError(f"port must be from 0 to 65535, not {self.port!r}")
        if self.token is not None and (
            not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_LENGTH
        ):
            raise ConfigurationError(
                f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters long"
            )
        if not isinstance(self.tokens, tuple) or not all(
            isinstance(t, NamedToken) for t in self.tokens
        ):
            raise ConfigurationError("tokens must be a tuple of NamedToken")
        if not isinstance(self.webhooks, tuple) or not all(
            isinstance(w, WebhookSource) for w in self.webhooks
        ):
            raise ConfigurationError("webhooks must be a tuple of WebhookSource")
        if self.proxy is not None and not isinstance(self.proxy, ProxyAuth):
            raise ConfigurationError(f"proxy must be a ProxyAuth, not {self.proxy!r}")
        names = [t.name for t in self.all_tokens]
        if len(set(names)) != len(names):
            raise ConfigurationError(
                f"two tokens are named alike (--token signs in as {SINGLE_TOKEN_NAME!r})"
            )
        if not is_loopback(self.host) and not self.auth_required:
            raise ConfigurationError(
                f"refusing to serve the dashboard on {self.host}, beyond this machine, without "
                f"a token: pass --token or set {TOKEN_ENV} (or {TOKENS_ENV}, or trust a proxy "
                "with --trust-proxy; or bind to 127.0.0.1)"
            )

    @property
    def all_tokens(self) -> tuple[NamedToken, ...]:
        """Every accepted token: ``token`` (as admin) and ``tokens``."""
        if self.token is None:
            return self.tokens
        return (NamedToken.of(SINGLE_TOKEN_NAME, "admin", self.token), *self.tokens)

    @property
    def auth_required(self) -> bool:
        """Whether every request must say who sends it (a token or a trusted proxy)."""
        return bool(self.all_tokens) or self.proxy is not None

    @classmethod
    def from_options(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        read_only: bool = False,
        refresh_seconds: float = 3.0,
        tokens_file: str | None = None,
        trusted_proxies: Sequence[str] = (),
        proxy_user_header: str | None = None,
        proxy_groups_header: str | None = None,
        proxy_roles: Sequence[str] = (),
        proxy_default_role: str | None = None,
        webhooks_file: str | None = None,
    ) -> DashboardConfig:
        """A config from options, each defaulting to its environment variable.

        The token defaults to PERDURE_DASHBOARD_TOKEN (an empty one is none);
        named tokens come from PERDURE_TOKENS and the tokens file
        (``tokens_file`` or PERDURE_TOKENS_FILE); proxy trust from
        PERDURE_TRUSTED_PROXIES and the PERDURE_PROXY_* variables; webhook
        sources from ``webhooks_file`` (or PERDURE_WEBHOOKS_FILE) and PERDURE_WEBHOOKS.
        """
        env = os.environ
        token = token or env.get(TOKEN_ENV) or None
        tokens = parse_tokens(env.get(TOKENS_ENV, ""), TOKENS_ENV)
        tokens_file = tokens_file or env.get(TOKENS_FILE_ENV) or None
        if tokens_file is not None:
            tokens += read_tokens_file(tokens_file)
        networks = parse_networks(list(trusted_proxies) or env.get(PROXIES_ENV, "").split(","))
        proxy = None
        if networks:
            default = proxy_default_role or env.get(PROXY_DEFAULT_ENV) or "viewer"
            proxy = ProxyAuth(
                networks,
                user_header=proxy_user_header or env.get(PROXY_USER_ENV) or "X-Forwarded-User",
                groups_header=proxy_groups_header or env.get(PROXY_GROUPS_ENV) or None,
                roles=parse_role_map(list(proxy_roles) or env.get(PROXY_ROLES_ENV, "").split(",")),
                default_role=None if default == "none" else check_role(default, "default role"),
            )
        webhooks = hooks_config.load(webhooks_file)
        return cls(host, port, token, read_only, refresh_seconds, tokens, proxy, webhooks)

    @property
    def url(self) -> str:
        """Where a browser on this machine reaches the dashboard."""
        host = self.host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"
