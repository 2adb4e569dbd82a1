"""Serving the dashboard with uvicorn, in the foreground or on a thread.

The listening socket is bound before uvicorn starts, so the URL printed (or
returned) is reachable at once, and port 0 picks a free port.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import uvicorn
from starlette.applications import Starlette

from perdure.api.app import App
from perdure.dashboard.app import create_app
from perdure.dashboard.config import DashboardConfig
from perdure.errors import ConfigurationError


def _listen(config: DashboardConfig) -> tuple[socket.socket, DashboardConfig]:
    """A socket listening on the configured address, and the config with its real port."""
    host = config.host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, config.port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {config.host} port {config.port}: {exc.strerror}"
        ) from None
    sock.listen(128)
    return sock, replace(config, port=int(sock.getsockname()[1]))


#: What builds an ASGI application other than the dashboard (the API alone).
Factory = Callable[[App, DashboardConfig], Starlette]


def _server(
    app: App, config: DashboardConfig, factory: Factory | None, reader: App | None
) -> uvicorn.Server:
    settings = uvicorn.Config(
        factory(app, config) if factory is not None else create_app(app, config, reader),
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
        # The peer's address is the TCP peer's, never a header's claim: the
        # trusted-proxy check and the audit record rely on it.
        proxy_headers=False,
    )
    return uvicorn.Server(settings)


def serve(
    app: App,
    config: DashboardConfig,
    *,
    ready: Callable[[str], None] | None = None,
    factory: Factory | None = None,
    reader: App | None = None,
) -> None:
    """Serve the dashboard of ``app`` until SIGINT or SIGTERM.

    The schema is checked (and migrated, if the App does that) first, so a
    database problem shows before anything listens; ``ready`` is then called
    with the dashboard's URL, already reachable. With ``reader`` (an App on
    a hot standby) pages read from it; actions go through ``app``. With
    ``factory``, that application (the API alone) is served instead.
    """
    app.ensure_schema()
    sock, config = _listen(config)
    try:
        server = _server(app, config, factory, reader)
        if ready is not None:
            ready(config.url)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn stops gracefully on Ctrl-C, then raises it again: a clean stop.
        pass
    finally:
        sock.close()


class BackgroundServer:
    """The dashboard served on a thread of this process (tests, notebooks, scripts).

    Port 0 picks a free port; ``url`` tells which.
    """

    def __init__(self, app: App, config: DashboardConfig, reader: App | None = None) -> None:
        """Listen now (so the URL is known) and start serving on a thread (see ``serve``)."""
        app.ensure_schema()
        self._sock, config = _listen(config)
        self.url = config.url
        self._server = _server(app, config, None, reader)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="perdure-dashboard",
            daemon=True,
        )
        self._thread.start()

    def wait_started(self, timeout: float = 10.0) -> None:
        """Block until the server accepts connections; TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise TimeoutError(f"the dashboard did not start within {timeout} s")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
