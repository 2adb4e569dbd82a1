"""Structured logs: records about runs and steps carry their fields; JSON lines.

Also the whole `perdure worker` process: --log-format json and --metrics-port
together, on a real subprocess.
"""

from __future__ import annotations

import io
import json
import logging
import signal
import socket
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import perdure
from helpers import BackgroundWorker, WorkerProcess, wait_until
from perdure.errors import ConfigurationError
from perdure.observability import JsonFormatter, LogContextFilter, configure_logging
from perdure.observability.logs import TextFormatter

FIELDS = ("run_id", "workflow", "step", "attempt", "worker_id")
OPTIONS = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def record(**extra: Any) -> logging.LogRecord:
    """A record as ``logging`` makes it, with ``extra`` fields."""
    return logging.getLogger("perdure.step").makeRecord(
        "perdure.step", logging.INFO, __file__, 1, "step %r done", ("ship",), None, extra=extra
    )


def test_the_json_formatter_prints_the_fields_a_record_has() -> None:
    line = json.loads(
        JsonFormatter().format(record(run_id="r1", workflow="w", step="ship", attempt=2))
    )
    assert line.pop("time").endswith("+00:00")
    assert line == {
        "level": "info",
        "logger": "perdure.step",
        "message": "step 'ship' done",
        "run_id": "r1",
        "workflow": "w",
        "step": "ship",
        "attempt": 2,
    }
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record(run_id="r1")
        failed.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(failed))
    assert line["error"] == "ValueError: boom"
    assert "Traceback" in line["traceback"] and "\n" not in JsonFormatter().format(failed)


def test_the_text_formatter_appends_the_fields_but_the_worker() -> None:
    text = TextFormatter().format(record(run_id="r1", step="ship", attempt=1, worker_id="w-1"))
    assert text.endswith("perdure.step: step 'ship' done [run_id=r1 step=ship attempt=1]")
    assert TextFormatter().format(record()).endswith("step 'ship' done")


def test_configure_logging_refuses_an_unknown_format() -> None:
    with pytest.raises(ConfigurationError, match="text, json"):
        configure_logging("info", "xml")


def test_records_about_runs_and_steps_carry_their_fields(app: perdure.App) -> None:
    """The engine's records, and the workflow's own through LogContextFilter."""
    from apps import observed_app

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    loggers = [logging.getLogger(name) for name in ("perdure", "observed")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        app.workflow("observed_ship")(observed_app.observed_ship)
        app.workflow("observed_fail")(observed_app.observed_fail)
        ship, fail = app.start("observed_ship", 7), app.start("observed_fail", 8)
        with BackgroundWorker(app, **OPTIONS) as worker:
            assert ship.result(timeout=60) == 7
            with pytest.raises(perdure.RunFailed):
                fail.result(timeout=60)
            wait_until(lambda: worker.count("execution_finished") == 3)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    worker_id = worker.worker.id

    def find(logger: str, contains: str) -> dict[str, Any]:
        found = [x for x in lines if x["logger"] == logger and contains in x["message"]]
        assert len(found) == 1, (logger, contains, lines)
        return found[0]

    # The workflow's own record, from a step on a worker thread.
    shipping = find("observed", "shipping order 7")
    assert {k: shipping[k] for k in FIELDS} == {
        "run_id": ship.id,
        "workflow": "observed_ship",
        "step": "ship",
        "attempt": 1,
        "worker_id": worker_id,
    }
    retry = find("perdure.step", "will be retried")
    assert {k: retry[k] for k in FIELDS} == {
        "run_id": fail.id,
        "workflow": "observed_fail",
        "step": "charge",
        "attempt": 1,
        "worker_id": worker_id,
    }
    failed = find("perdure.step", "failed for good")
    assert (failed["step"], failed["attempt"], failed["level"]) == ("charge", 2, "warning")
    run_failed = find("perdure.run", f"run {fail.id} (observed_fail) failed")
    assert run_failed["level"] == "warning" and run_failed["run_id"] == fail.id
    assert "step" not in run_failed  # a record about the whole run
    assert run_failed["worker_id"] == worker_id
    completed = find("perdure.step", "'ship' of run")
    assert completed["level"] == "debug" and completed["run_id"] == ship.id
    # Every record about a run names it.
    for line in lines:
        if line["logger"] in ("perdure.run", "perdure.step"):
            assert line["run_id"] in (ship.id, fail.id) and line["worker_id"] == worker_id


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_worker_process_logs_json_and_serves_metrics(
    spawn_worker: Callable[..., WorkerProcess], make_app: Callable[..., perdure.App]
) -> None:
    client = make_app()
    port = free_port()
    worker = spawn_worker(
        "apps.observed_app:app",
        "--log-format",
        "json",
        "--metrics-port",
        str(port),
        "--worker-id",
        "observed-1",
        "--poll-seconds",
        "0.1",
    )

    def registered() -> bool:
        # The worker creates the schema as it starts: the client's reads never do.
        try:
            return any(w.name == "observed_fail" for w in client.workflows())
        except perdure.SchemaError:
            return False

    wait_until(
        registered,
        what=f"the worker to register its workflows; output:\n{worker.output()}",
    )
    ship, fail = client.start("observed_ship", 1), client.start("observed_fail", 2)
    assert ship.result(timeout=60) == 1
    with pytest.raises(perdure.RunFailed):
        fail.result(timeout=60)

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    finished = "perdure_runs_finished_total"
    failed = (finished, (("status", "failed"), ("workflow", "observed_fail")))
    samples = wait_until(
        lambda: (m := scraped()).get(failed) and m, what="the failed run to be counted"
    )
    assert samples[(finished, (("status", "completed"), ("workflow", "observed_ship")))] == 1
    retries = ("perdure_step_retries_total", (("kind", "step"), ("workflow", "observed_fail")))
    assert samples[retries] == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    lines = [json.loads(line) for line in worker.output().splitlines() if line.strip()]
    assert lines[0]["message"].startswith("perdure worker observed-1 serving")
    assert any(f"http://127.0.0.1:{port}/metrics" in line["message"] for line in lines)
    [shipping] = [line for line in lines if line["logger"] == "observed"]
    assert {k: shipping[k] for k in FIELDS} == {
        "run_id": ship.id,
        "workflow": "observed_ship",
        "step": "ship",
        "attempt": 1,
        "worker_id": "observed-1",
    }
    [retry] = [line for line in lines if "will be retried" in line["message"]]
    assert (retry["run_id"], retry["step"], retry["attempt"]) == (fail.id, "charge", 1)
