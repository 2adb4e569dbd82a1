"""The worker's /metrics endpoint, scraped over HTTP after a known workload.

Every series of docs/observability.md must be there with the exact value the
workload implies: 5 runs that complete 3 steps each, 2 runs whose step fails,
is retried once and fails for good, and 1 run whose workflow body fails once
and then completes.
"""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.engine.observer import Observer
from perdure.errors import ConfigurationError
from perdure.observability import WorkerMetrics

FAST_RETRY = perdure.RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
OPTIONS = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://127.0.0.1:port/metrics, by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sample ``name{labels}``; fails the test if the endpoint does not expose it."""
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} is not exposed"
    return samples[key]


def metrics_of(worker: BackgroundWorker) -> WorkerMetrics:
    """The WorkerMetrics observer of an in-process worker."""
    return next(o for o in worker.worker.observer.observers if isinstance(o, WorkerMetrics))


def build(app: perdure.App) -> dict[str, int]:
    """Three workflows; the returned dict counts the body executions of 'shaky'."""
    executions = {"shaky": 0}

    async def noop() -> int:
        return 1

    def refuse() -> int:
        raise ValueError("card declined")

    @app.workflow("ok")
    async def ok(ctx: perdure.Context) -> int:
        return await ctx.step("a", noop) + await ctx.step("b", noop) + await ctx.step("c", noop)

    @app.workflow("flaky")
    async def flaky(ctx: perdure.Context) -> int:
        await ctx.step("prepare", noop)
        return await ctx.step("charge", refuse, retry=FAST_RETRY)

    @app.workflow("shaky", retry=FAST_RETRY)
    async def shaky(ctx: perdure.Context) -> int:
        executions["shaky"] += 1
        if executions["shaky"] == 1:
            raise RuntimeError("not yet")
        return 1

    return executions


def test_metrics_endpoint_counts_a_known_workload(app: perdure.App) -> None:
    executions = build(app)
    ok = [app.start("ok") for _ in range(5)]
    flaky = [app.start("flaky") for _ in range(2)]
    shaky = app.start("shaky")
    later = app.start("ok", delay=3600)  # waits in the queue: the depth gauge shows it
    with BackgroundWorker(app, metrics_port=0, **OPTIONS) as worker:
        port = wait_until(lambda: metrics_of(worker).port, what="the metrics endpoint")
        for handle in ok:
            assert handle.result(timeout=60) == 3
        for handle in flaky:
            with pytest.raises(perdure.RunFailed):
                handle.result(timeout=60)
        assert shaky.result(timeout=60) == 1
        # The counters are updated after the result is written: wait for the
        # last execution to be counted before reading them.
        wait_until(
            lambda: worker.count("execution_finished") == 5 + 2 * 2 + 2, what="every execution"
        )
        samples = scrape(port)
    assert executions["shaky"] == 2

    def v(name: str, **labels: str) -> float:
        return value(samples, name, **labels)

    assert v("perdure_runs_started_total", workflow="ok") == 5
    assert v("perdure_runs_started_total", workflow="flaky") == 2
    assert v("perdure_runs_started_total", workflow="shaky") == 1
    assert v("perdure_runs_finished_total", workflow="ok", status="completed") == 5
    assert v("perdure_runs_finished_total", workflow="flaky", status="failed") == 2
    assert v("perdure_runs_finished_total", workflow="shaky", status="completed") == 1
    assert v("perdure_run_retries_total", workflow="shaky") == 1

    step = "perdure_step_duration_seconds_count"
    assert v(step, workflow="ok", kind="step", status="completed") == 15
    assert v(step, workflow="flaky", kind="step", status="completed") == 2
    assert v(step, workflow="flaky", kind="step", status="retrying") == 2
    assert v(step, workflow="flaky", kind="step", status="failed") == 2
    assert not [k for k in samples if k[0] == step and ("workflow", "shaky") in k[1]]
    bucket = "perdure_step_duration_seconds_bucket"
    assert v(bucket, workflow="ok", kind="step", status="completed", le="+Inf") == 15
    assert v("perdure_step_retries_total", workflow="flaky", kind="step") == 2

    # Each flaky run is claimed twice (its step's retry hands the task back),
    # the shaky one twice (its body's retry), each ok run once.
    assert v("perdure_tasks_claimed_total", queue="ok", kind="run") == 5
    assert v("perdure_tasks_claimed_total", queue="flaky", kind="run") == 4
    assert v("perdure_tasks_claimed_total", queue="shaky", kind="run") == 2
    task = "perdure_task_duration_seconds_count"
    assert v(task, workflow="ok", kind="run", outcome="completed") == 5
    assert v(task, workflow="flaky", kind="run", outcome="suspended") == 2
    assert v(task, workflow="flaky", kind="run", outcome="failed") == 2
    assert v(task, workflow="shaky", kind="run", outcome="retrying") == 1
    assert v(task, workflow="shaky", kind="run", outcome="completed") == 1
    # Every claim statement is timed, including those that found nothing.
    assert v("perdure_claim_duration_seconds_count") >= 3
    assert v("perdure_claim_duration_seconds_sum") > 0

    assert v("perdure_queue_depth", queue="ok", state="waiting") == 1
    for queue in ("ok", "flaky", "shaky"):
        for state in ("ready", "running", "paused"):
            assert v("perdure_queue_depth", queue=queue, state=state) == 0
        assert v("perdure_queue_oldest_ready_seconds", queue=queue) == 0
    # Nothing was lost or dead-lettered: a labelled counter has no sample yet.
    assert not [key for key in samples if key[0] == "perdure_lease_losses_total"]
    assert v("perdure_tasks_dead_lettered_total") == 0
    assert v("perdure_tasks_running") == 0
    assert 0 <= v("perdure_worker_heartbeat_age_seconds") < 60
    assert later.status().value == "queued"


def test_several_workers_in_one_process_keep_separate_series(
    make_app: Callable[..., perdure.App],
) -> None:
    first, second = make_app(), make_app()
    for app in (first, second):

        @app.workflow("ok")
        async def ok(ctx: perdure.Context) -> int:
            return 1

    with (
        BackgroundWorker(first, metrics_port=0, **OPTIONS) as one,
        BackgroundWorker(second, metrics_port=0, **OPTIONS) as two,
    ):
        ports = [wait_until(lambda w=w: metrics_of(w).port) for w in (one, two)]
        assert ports[0] != ports[1]
        first.start("ok").result(timeout=60)
        wait_until(lambda: one.count("execution_finished") + two.count("execution_finished") == 1)
        finished = ("perdure_runs_finished_total", (("status", "completed"), ("workflow", "ok")))
        counts = [scrape(port).get(finished, 0) for port in ports]
    # Both workers serve the same queue: one of them ran the run, and only
    # its endpoint counts it.
    assert sorted(counts) == [0, 1]


def test_the_endpoint_stops_with_the_worker(app: perdure.App) -> None:
    build(app)
    worker = BackgroundWorker(app, metrics_port=0, **OPTIONS)
    port = wait_until(lambda: metrics_of(worker).port)
    assert value(scrape(port), "perdure_tasks_running") == 0
    worker.stop()
    with pytest.raises(OSError):
        scrape(port)


@pytest.mark.parametrize("port", [-1, 70000, "9464", True])
def test_a_bad_metrics_port_is_refused_before_the_worker_starts(
    app: perdure.App, port: object
) -> None:
    build(app)
    with pytest.raises(ConfigurationError, match="metrics_port"):
        app.worker(metrics_port=port)


def test_a_metrics_port_already_taken_stops_the_worker_with_a_clear_error(
    app: perdure.App,
) -> None:
    build(app)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        worker = app.worker(metrics_port=taken.getsockname()[1], **OPTIONS)
        with pytest.raises(ConfigurationError, match=r"cannot serve metrics on 127\.0\.0\.1"):
            asyncio.run(worker.run())


class Broken(Observer):
    """An observer whose every hook raises."""

    def step_started(self, step: Any) -> Any:
        raise RuntimeError("observer bug")

    def step_finished(self, *args: Any) -> None:
        raise RuntimeError("observer bug")

    def run_finished(self, *args: Any) -> None:
        raise RuntimeError("observer bug")


def test_a_failing_observer_changes_nothing_for_the_runs(
    app: perdure.App, caplog: pytest.LogCaptureFixture
) -> None:
    build(app)
    handles = [app.start("ok") for _ in range(3)]
    with BackgroundWorker(app, observers=[Broken()], **OPTIONS):
        assert [h.result(timeout=60) for h in handles] == [3, 3, 3]
    failures = [r for r in caplog.records if "observer" in r.getMessage()]
    # Logged once per hook, not once per call.
    assert sorted(r.getMessage().split(" failed in ")[1].split(" ")[0] for r in failures) == [
        "run_finished",
        "step_finished",
        "step_started",
    ]
