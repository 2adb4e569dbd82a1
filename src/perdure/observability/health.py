"""Liveness and readiness of a worker, served next to ``/metrics`` for Kubernetes probes.

- ``/healthz`` (liveness): 200 while the worker's event loop answers within
  ``LOOP_SECONDS``. A database outage does not fail it: the worker rides
  the outage out, and a restart would not bring the database back.
- ``/readyz`` (readiness): 200 once the worker has started, while it is not
  stopping (SIGTERM turns it to 503 at once) and its last heartbeat reached
  the database less than ``STALE_BEATS`` heartbeat intervals ago. Its body
  names the workflow versions whose unfinished runs no live worker serves
  (one ``stranded:`` line each; ``/readyz?format=json`` or ``Accept:
  application/json`` gives ``{"ready", "reason", "stranded": [...]}``).
  Stranded versions do not change the status code: they are the fleet's
  matter, not this worker's, and taking ready workers out of service would
  not serve those runs (see docs/versioning.md, "Runs no worker serves").

Every other path serves the Prometheus registry, as before.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from perdure.engine.observer import WorkerView
    from perdure.types import StrandedVersion

#: The event loop must run a callback within this many seconds to count as alive.
LOOP_SECONDS = 5.0
#: Readiness fails after this many heartbeat intervals without a heartbeat.
STALE_BEATS = 3
#: How long /readyz waits for the stranded versions before it leaves them out.
STRANDED_SECONDS = 2.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Health:
    """What the probes report, fed by the worker's observer hooks."""

    def __init__(self) -> None:
        """Nothing started yet: not ready, and alive (the process answers)."""
        self.worker: WorkerView | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_beat = time.monotonic()
        #: Reads the stranded versions (None: unknown); set by WorkerMetrics.
        self.stranded: Callable[[float], list[StrandedVersion] | None] | None = None

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

    def readiness(self, as_json: bool) -> tuple[bool, str]:
        """Whether ready, and the /readyz body: the reason, then the stranded versions."""
        ok, reason = self.ready()
        found = self.stranded(STRANDED_SECONDS) if self.stranded and self.worker else None
        if as_json:
            stranded = (
                None
                if found is None
                else [
                    {
                        "workflow": s.workflow,
                        "version": s.version,
                        "runs": s.runs,
                        "queues": s.queues,
                        "served": s.served,
                        "message": s.message,
                    }
                    for s in found
                ]
            )
            return ok, json.dumps({"ready": ok, "reason": reason, "stranded": stranded}) + "\n"
        lines = [reason, *(f"stranded: {s.message}" for s in found or ())]
        return ok, "".join(f"{line}\n" for line in lines)


def serve(
    host: str, port: int, registry: CollectorRegistry, health: Health
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/healthz``, ``/readyz`` and the metrics on ``host:port`` on a daemon thread."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            ok, reason = health.alive()
            start_response(_status(ok), [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{reason}\n".encode()]
        if path == "/readyz":
            as_json = "format=json" in environ.get("QUERY_STRING", "") or (
                "application/json" in environ.get("HTTP_ACCEPT", "")
            )
            ok, body = health.readiness(as_json)
            kind = "application/json" if as_json else "text/plain; charset=utf-8"
            start_response(_status(ok), [("Content-Type", kind)])
            return [body.encode()]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="perdure-metrics", daemon=True)
    thread.start()
    return server, thread


def _status(ok: bool) -> str:
    return "200 OK" if ok else "503 Service Unavailable"


class _Quiet(WSGIRequestHandler):
    """A request handler that does not log every probe to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""
