"""Serving the dashboard with uvicorn, in the foreground or on a thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import uvicorn

from perdure.api.app import App
from perdure.dashboard.app import create_app
from perdure.dashboard.config import DashboardConfig


def _server(app: App, config: DashboardConfig, sock: socket.socket | None = None) -> uvicorn.Server:
    settings = uvicorn.Config(
        create_app(app, config),
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
    )
    return uvicorn.Server(settings)


def serve(app: App, config: DashboardConfig, *, ready: Callable[[str], None] | None = None) -> None:
    """Serve the dashboard of ``app`` until SIGINT or SIGTERM.

    The schema is checked (and migrated, if the App does that) first, so a
    database problem shows before the server starts; ``ready`` is then called
    with the dashboard's URL.
    """
    app.ensure_schema()
    server = _server(app, config)
    if ready is not None:
        ready(config.url)
    server.run()


class BackgroundServer:
    """The dashboard served on a thread of this process (for tests and ``demo --serve``).

    Port 0 picks a free port; :attr:`url` tells which.
    """

    def __init__(self, app: App, config: DashboardConfig) -> None:
        """Bind the socket now (so the URL is known) and start serving on a thread."""
        app.ensure_schema()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((config.host, config.port))
        port = self._sock.getsockname()[1]
        self.url = f"http://{config.host}:{port}/"
        self._server = _server(app, config)
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
