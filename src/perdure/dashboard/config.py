"""The dashboard's settings, and the rule that keeps it off the network without a token."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from perdure.errors import ConfigurationError

#: The environment variable that holds the dashboard's access token.
TOKEN_ENV = "PERDURE_DASHBOARD_TOKEN"
#: The shortest token accepted: long enough not to be guessed by hand.
MIN_TOKEN_LENGTH = 12


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
    Bearer`` header, or the login form's cookie); mandatory when ``host`` is
    not a loopback address. ``read_only``: no action is shown or accepted.
    ``refresh_seconds``: how often live pages fetch fresh data (0: never).
    """

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = 3.0

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
        if not is_loopback(self.host) and self.token is None:
            raise ConfigurationError(
                f"refusing to serve the dashboard on {self.host}, beyond this machine, without "
                f"a token: pass --token or set {TOKEN_ENV} (or bind to 127.0.0.1)"
            )

    @classmethod
    def from_options(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        read_only: bool = False,
        refresh_seconds: float = 3.0,
    ) -> DashboardConfig:
        """A config whose token defaults to PERDURE_DASHBOARD_TOKEN (an empty one is none)."""
        token = token or os.environ.get(TOKEN_ENV) or None
        return cls(host, port, token, read_only, refresh_seconds)

    @property
    def url(self) -> str:
        """Where a browser on this machine reaches the dashboard."""
        host = self.host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"
