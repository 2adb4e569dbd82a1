"""The worker's /healthz and /readyz endpoints, probed over HTTP as Kubernetes does."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.observability import WorkerMetrics

OPTIONS = {"concurrency": 2, "poll_seconds": 0.05, "lease_seconds": 3, "shutdown_seconds": 30}


def probe(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` on the metrics port: the status and the body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metrics_of(worker: BackgroundWorker) -> WorkerMetrics:
    """The WorkerMetrics observer of an in-process worker."""
    return next(o for o in worker.worker.observer.observers if isinstance(o, WorkerMetrics))


def test_ready_while_serving_and_not_ready_once_stopping(app: perdure.App) -> None:
    release = threading.Event()

    def hold() -> int:
        release.wait(60)
        return 1

    @app.workflow("held")
    async def held(ctx: perdure.Context) -> int:
        return await ctx.step("hold", hold)

    worker = BackgroundWorker(app, metrics_port=0, **OPTIONS)
    try:
        port = wait_until(lambda: metrics_of(worker).port)
        assert probe(port, "/healthz") == (200, "ok\n")
        wait_until(lambda: probe(port, "/readyz")[0] == 200, what="the worker to be ready")
        run = app.start("held")
        wait_until(lambda: worker.worker.running, what="the run to be claimed")
        # SIGTERM's effect: no more claims, in-flight work finishes.
        worker.loop.call_soon_threadsafe(worker.worker.request_stop)
        wait_until(lambda: probe(port, "/readyz") == (503, "stopping\n"), what="not ready")
        assert probe(port, "/healthz")[0] == 200
        release.set()
        assert run.result(timeout=30) == 1
    finally:
        release.set()
        worker.stop()


def test_not_ready_when_heartbeats_stop_reaching_the_database(app: perdure.App) -> None:
    @app.workflow("noop")
    async def noop(ctx: perdure.Context) -> int:
        return 1

    with BackgroundWorker(app, metrics_port=0, **OPTIONS) as worker:
        metrics = metrics_of(worker)
        port = wait_until(lambda: metrics.port)
        wait_until(lambda: probe(port, "/readyz")[0] == 200, what="the worker to be ready")
        # The last heartbeat that got through is long ago (as in an outage).
        metrics.health.last_beat = time.monotonic() - 3600
        status, reason = probe(port, "/readyz")
        assert status == 503 and "no heartbeat" in reason
        assert probe(port, "/healthz")[0] == 200
        # The next heartbeat (every lease/3 = 1 s) makes it ready again.
        wait_until(lambda: probe(port, "/readyz")[0] == 200, what="ready again")
        assert probe(port, "/metrics")[0] == 200
