"""Liveness and readiness of a worker, served next to ``/metrics`` for Kubernetes probes.

- ``/healthz`` (liveness): 200 while the worker's event loop answers within
  ``LOOP_SECONDS``. A database outage does not fail it: the worker rides
  the outage out, and a restart would not bring the database back.
- ``/readyz`` (readiness): 200 once the worker has started, while it is not
  stopping (SIGTERM turns it to 503 at once) and its last heartbeat reached
  the database less than ``STALE_BEATS`` heartbeat intervals ago.

Every other path serves the Prometheus registry, as before.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from perdure.engine.observer import WorkerView

#: The event loop must run a callback within this many seconds to count as alive.
LOOP_SECONDS = 5.0
#: Readiness fails after this many heartbeat intervals without a heartbeat.
STALE_BEATS = 3

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Health:
    """What the probes report, fed by the worker's observer hooks."""

    def __init__(self) -> None:
        """Nothing started yet: not ready, and alive (the process answers)."""
        self.worker: WorkerView | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_beat = time.monotonic()

    def started(self, worker: WorkerView) -> None:
        """The worker runs on the current event loop."""
        self.worker = worker
        self.loop = asyncio.get_running_loop()
        self.last_beat = time.monotonic()

    def stopped(self) -> None:
        """The worker stopped."""
        self.worker = None

    def beat(self) -> None:
        """A heartbeat reached the database."""
        self.last_beat = time.monotonic()

    def alive(self) -> tuple[bool, str]:
        """Whether the worker's event loop answers (True before it started)."""
        loop = self.loop
        if loop is None or loop.is_closed() or self.worker is None:
            return True, "ok"
        answered = threading.Event()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:
            return True, "ok"  # the loop is closing: the worker is on its way out
        if answered.wait(LOOP_SECONDS):
            return True, "ok"
        return False, f"event loop unresponsive for {LOOP_SECONDS:g} s"

    def ready(self) -> tuple[bool, str]:
        """Whether the worker serves: started, not stopping, heartbeats getting through."""
        worker = self.worker
        if worker is None:
            return False, "not started"
        if worker.stopping:
            return False, "stopping"
        age = time.monotonic() - self.last_beat
        limit = STALE_BEATS * worker.heartbeat_seconds
        if age > limit:
            return False, f"no heartbeat reached the database for {age:.0f} s"
        return True, "ok"


def serve(
    host: str, port: int, registry: CollectorRegistry, health: Health
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/healthz``, ``/readyz`` and the metrics on ``host:port`` on a daemon thread."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            ok, reason = health.alive() if path == "/healthz" else health.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{reason}\n".encode()]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="perdure-metrics", daemon=True)
    thread.start()
    return server, thread


class _Quiet(WSGIRequestHandler):
    """A request handler that does not log every probe to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""
