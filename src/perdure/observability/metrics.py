"""Prometheus metrics of one worker, served on ``/metrics``.

Every ``WorkerMetrics`` has a registry of its own (not the process-wide
default), so that several workers in one process, or one test after another,
never share a series. Counters and histograms are updated from the engine's
observer hooks, in memory: no metric adds a database round trip. The queue
gauges are read from the database when Prometheus scrapes, with one cheap
statement (``queue_list``, the one behind ``perdure queues list``) on the worker's
own pool.

docs/observability.md lists every series with its labels.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from perdure.engine.control import Outcome
from perdure.engine.observer import Observer, StepAttempt, WorkerView
from perdure.errors import ConfigurationError
from perdure.observability import health
from perdure.store.rows import ClaimedTask
from perdure.types import QueueInfo, StrandedVersion

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric


log = logging.getLogger("perdure.metrics")

#: Step durations: from a millisecond (a no-op) to ten minutes (a slow call).
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)
#: Claim statements: a fraction of a millisecond on an idle server, more under load.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
#: The states of a queue's tasks, as ``perdure queues list`` shows them.
QUEUE_STATES = ("ready", "running", "waiting", "paused")


def _cached(labels: Callable[..., Any]) -> Callable[..., Any]:
    """``metric.labels`` behind a dict: the hot path skips its argument checks and lock."""
    children: dict[tuple[str, ...], Any] = {}

    def child(*values: str) -> Any:
        found = children.get(values)
        if found is None:
            found = children[values] = labels(*values)
        return found

    return child


class WorkerMetrics(Observer):
    """An observer that keeps a worker's Prometheus series; ``serve`` exposes them.

    ``app.worker(metrics_port=9464)`` and ``perdure worker --metrics-port
    9464`` create one and serve it while the worker runs. To expose the series
    another way, pass ``WorkerMetrics()`` in ``app.worker(observers=[...])``
    and read ``registry``.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """Register the series in ``registry`` (a new one by default).

        With ``port`` (0: any free port), ``/metrics`` is served on ``host``
        while the observed worker runs.
        """
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
        ):
            raise ConfigurationError(
                f"metrics_port must be a port number (0 to 65535), not {port!r}"
            )
        if not isinstance(host, str) or not host:
            raise ConfigurationError(f"metrics_host must be a host name or address, not {host!r}")
        self.serve_on = None if port is None else (host, port)
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.runs_started = Counter(
            "perdure_runs_started",
            "Runs this worker began executing: first claims of a run's task "
            "(a run queued again by retry has a new task and counts again).",
            ["workflow"],
            registry=r,
        )
        self.runs_finished = Counter(
            "perdure_runs_finished",
            "Runs this worker ended, by final status.",
            ["workflow", "status"],
            registry=r,
        )
        self.run_retries = Counter(
            "perdure_run_retries",
            "Executions whose workflow body raised and that will be tried again.",
            ["workflow"],
            registry=r,
        )
        self.step_duration = Histogram(
            "perdure_step_duration_seconds",
            "Time of each step attempt's own code, by how the attempt ended.",
            ["workflow", "kind", "status"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_retries = Counter(
            "perdure_step_retries",
            "Step attempts that failed and will be retried.",
            ["workflow", "kind"],
            registry=r,
        )
        self.task_duration = Histogram(
            "perdure_task_duration_seconds",
            "Time from a task's claim to the end of its execution, by outcome.",
            ["workflow", "kind", "outcome"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.claim_duration = Histogram(
            "perdure_claim_duration_seconds",
            "Time of each claim (the claim statement, with its queue locks if any).",
            buckets=CLAIM_BUCKETS,
            registry=r,
        )
        self.tasks_claimed = Counter(
            "perdure_tasks_claimed", "Tasks this worker claimed.", ["queue", "kind"], registry=r
        )
        self.lease_losses = Counter(
            "perdure_lease_losses",
            "Tasks whose lease this worker lost: a fenced write found another owner.",
            ["workflow"],
            registry=r,
        )
        self.tasks_reaped_for_good = Counter(
            "perdure_tasks_dead_lettered",
            "Tasks this worker's reaper reaped for good: their lease lapsed max_lapses times.",
            registry=r,
        )
        self.loop_blocks = Counter(
            "perdure_event_loop_blocked",
            "Times a step held this worker's event loop past the blocked-loop threshold.",
            registry=r,
        )
        self.tasks_running = Gauge(
            "perdure_tasks_running", "Tasks this worker is executing now.", registry=r
        )
        self.heartbeat_age = Gauge(
            "perdure_worker_heartbeat_age_seconds",
            "Seconds since this worker's last heartbeat reached the database.",
            registry=r,
        )
        self.stuck_threads = Gauge(
            "perdure_worker_stuck_threads",
            "Threads still running a def step that timed out or whose run this worker lost;"
            " each holds one of the worker's slots until it returns.",
            registry=r,
        )
        self._worker: WorkerView | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_beat = time.monotonic()
        #: What /healthz and /readyz report.
        self.health = health.Health()
        self.tasks_running.set_function(self._running)
        self.heartbeat_age.set_function(lambda: time.monotonic() - self._last_beat)
        self.stuck_threads.set_function(
            lambda: float(self._worker.stuck_threads) if self._worker is not None else 0.0
        )
        self.queues = _QueueDepth(self)
        r.register(self.queues)
        self.events = _EventCounts(self)
        r.register(self.events)
        self.stranded = _Stranded(self)
        r.register(self.stranded)
        self.health.stranded = self.stranded.read
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self._started = _cached(self.runs_started.labels)
        self._finished = _cached(self.runs_finished.labels)
        self._steps = _cached(self.step_duration.labels)
        self._step_retries = _cached(self.step_retries.labels)
        self._tasks = _cached(self.task_duration.labels)
        self._claimed = _cached(self.tasks_claimed.labels)

    # Serving -----------------------------------------------------------------

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` on a thread; the port.

        Port 0 takes any free one. See ``perdure.observability.health``.
        """
        try:
            self._server, self._thread = health.serve(host, port, self.registry, self.health)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self.port = int(self._server.server_port)
        log.info("serving metrics on http://%s:%d/metrics", host, self.port)
        return self.port

    def close(self) -> None:
        """Stop serving (if serving)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    # Observer hooks ------------------------------------------------------------

    def worker_started(self, worker: WorkerView) -> None:
        """Remember the worker: its running tasks and its pool feed the gauges."""
        self._worker = worker
        self._loop = asyncio.get_running_loop()
        self.health.started(worker)
        if self.serve_on is not None and self._server is None:
            self.serve(self.serve_on[1], self.serve_on[0])
        self._last_beat = time.monotonic()

    def worker_stopped(self, worker: WorkerView) -> None:
        """Stop serving if the worker started it; forget the worker (counters keep their values)."""
        self._worker = None
        self.health.stopped()
        if self.serve_on is not None:
            self.close()

    def heartbeat(self) -> None:
        """Reset the heartbeat age."""
        self._last_beat = time.monotonic()
        self.health.beat()

    def claimed(self, tasks: Sequence[ClaimedTask], seconds: float) -> None:
        """Observe the claim's time; count the tasks, and the runs started."""
        self.claim_duration.observe(seconds)
        for task in tasks:
            self._claimed(task.queue, task.kind).inc()
            if task.kind == "run" and task.fence.attempt == 1 and not task.finished:
                self._started(task.workflow).inc()

    def execution_finished(
        self, task: ClaimedTask, token: Any, outcome: Outcome, seconds: float
    ) -> None:
        """Observe the task's time by outcome."""
        self._tasks(task.workflow, task.kind, outcome).observe(seconds)

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """Observe the attempt's time; count a retry."""
        self._steps(step.task.workflow, step.kind, status).observe(seconds)
        if status == "retrying":
            self._step_retries(step.task.workflow, step.kind).inc()

    def run_retrying(self, task: ClaimedTask, delay: float, error: BaseException) -> None:
        """Count the retry."""
        self.run_retries.labels(task.workflow).inc()

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None
    ) -> None:
        """Count the run by status."""
        self._finished(workflow, status).inc()

    def lease_lost(self, task: ClaimedTask) -> None:
        """Count the loss."""
        self.lease_losses.labels(task.workflow).inc()

    def reaped_for_good(self, count: int) -> None:
        """Count the tasks (the metric keeps its published name)."""
        self.tasks_reaped_for_good.inc(count)

    def loop_blocked(self, run_id: str | None, step: str | None, seconds: float) -> None:
        """Count the stall."""
        self.loop_blocks.inc()

    def _running(self) -> float:
        worker = self._worker
        return float(len(worker.running)) if worker is not None else 0.0


class _QueueDepth(Collector):
    """``perdure_queue_depth`` and ``perdure_queue_oldest_ready_seconds``, read at scrape time."""

    #: How long a scrape waits for the database before it leaves the queue series out.
    timeout = 5.0

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        """The families, without reading the database (registration calls this)."""
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                "perdure_queue_depth",
                "Tasks of each queue this worker serves, by state: ready (due now), "
                "running (claimed), waiting (due later), paused.",
                labels=["queue", "state"],
            ),
            GaugeMetricFamily(
                "perdure_queue_oldest_ready_seconds",
                "How long the oldest task due now has waited for a worker (0 if none).",
                labels=["queue"],
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        """Read the queues' counts now; leave the series out if the database does not answer."""
        rows = self._read()
        if rows is None:
            return []
        depth, oldest = self._families()
        assert self.metrics._worker is not None
        found = {info.name: info for info in rows}
        for queue in self.metrics._worker.queues:
            info = found.get(queue)
            for state in QUEUE_STATES:
                depth.add_metric([queue, state], float(getattr(info, state, 0)))
            oldest.add_metric([queue], float((info and info.oldest_seconds) or 0.0))
        return [depth, oldest]

    def _read(self) -> list[QueueInfo] | None:
        return read_now(
            self.metrics, lambda st: st.queues.list(), "the queues' depth", self.timeout
        )


#: The window of ``perdure_events_recent``, in seconds.
EVENTS_WINDOW = 300.0


class _EventCounts(Collector):
    """``perdure_events_recent``: events emitted in the last five minutes, by outcome."""

    timeout = 5.0

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        """The family, without reading the database."""
        return [self._family()]

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "perdure_events_recent",
            "Events emitted (app.emit, emit_event) in the last 5 minutes, by outcome: "
            "in (all of them), matched (woke or started a run), unmatched.",
            labels=["outcome"],
        )

    def collect(self) -> Iterable[Metric]:
        """Count the recent events now; leave the series out if the database does not answer."""
        row = read_now(
            self.metrics, lambda st: st.emissions.counts(EVENTS_WINDOW), "the events", self.timeout
        )
        if row is None:
            return []
        family = self._family()
        emitted, matched = float(row["emitted"]), float(row["matched"])
        family.add_metric(["in"], emitted)
        family.add_metric(["matched"], matched)
        family.add_metric(["unmatched"], emitted - matched)
        return [family]


class _Stranded(Collector):
    """``perdure_runs_stranded``: unfinished runs no live worker serves, by workflow and version.

    The count is the fleet's (every worker reports the same series: aggregate
    with ``max``), and a version appears only while some of its runs wait
    for a worker that has its code on their queue (see docs/versioning.md).
    """

    timeout = 5.0
    #: How long one reading is reused, in seconds (less than a heartbeat interval).
    CACHE_SECONDS = 2.0

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics
        self._cached: tuple[float, list[StrandedVersion]] | None = None

    def describe(self) -> Iterable[Metric]:
        """The family, without reading the database."""
        return [self._family()]

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "perdure_runs_stranded",
            "Unfinished runs of a workflow version that no live worker serves on their "
            "queue: they wait until a worker with that version starts, or are moved "
            "(perdure runs move-version).",
            labels=["workflow", "version"],
        )

    def read(self, timeout: float | None = None) -> list[StrandedVersion] | None:
        """The stranded versions; None without a worker or an answer from the database.

        A reading is reused for ``CACHE_SECONDS``: Prometheus and the
        readiness probe of every worker ask often, and the count walks every
        unfinished run (about 150 ms for 100,000 of them).
        """
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.CACHE_SECONDS:
            return cached[1]
        found: list[StrandedVersion] | None = read_now(
            self.metrics,
            lambda st: st.workflows.stranded(),
            "the stranded versions",
            self.timeout if timeout is None else timeout,
        )
        if found is not None:
            self._cached = (time.monotonic(), found)
        return found

    def collect(self) -> Iterable[Metric]:
        """Read the stranded versions now; leave the series out if the database does not answer."""
        found = self.read()
        if found is None:
            return []
        family = self._family()
        for entry in found:
            family.add_metric([entry.workflow, str(entry.version)], float(entry.runs))
        return [family]


def read_now(
    metrics: WorkerMetrics, make: Callable[[Any], Any], what: str, timeout: float
) -> Any | None:
    """Run the statement ``make(statements)`` on the observed worker's pool, at scrape time;
    None when no worker is observed, when scraped from an event loop, or on any error."""
    worker, loop = metrics._worker, metrics._loop
    store = worker.store if worker is not None else None
    if worker is None or store is None or loop is None or loop.is_closed():
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        # Scraped from inside an event loop (the worker's own, perhaps):
        # waiting here could block the very statement the wait is for.
        return None
    future = asyncio.run_coroutine_threadsafe(store.execute(make(store.statements)), loop)
    try:
        return future.result(timeout)
    except BaseException as exc:
        future.cancel()
        log.warning("metrics: could not read %s (%s)", what, exc)
        return None
