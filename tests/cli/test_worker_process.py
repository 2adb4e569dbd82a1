"""`perdure worker` as a real process: its stop signals, logging, metrics and stats options."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

import perdure
from helpers import wait_until

TARGET = "apps.crash_app:app"


def _started_slow_step(app: perdure.App, db: psycopg.Connection[Any], seconds: int) -> Any:
    """Start a crashy run whose slow step works for ``seconds``; wait until it is inside."""
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    db.execute("CREATE TABLE tx_ledger (run_id uuid, pid int)")
    wait_until(lambda: any(w.name == "crashy" for w in app.workflows()), 30, what="registration")
    handle = app.start("crashy", {"slow": seconds})
    wait_until(
        lambda: db.execute("SELECT count(*) FROM ledger WHERE step = 'slow'").fetchone() == (1,),
        30,
        what="the slow step to start",
    )
    return handle


def test_a_second_signal_stops_the_worker_at_once_and_hands_the_run_back(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    # In-flight runs may take ten minutes to finish after the first signal.
    worker = spawn_worker(TARGET, "--concurrency", "1", "--shutdown-seconds", "600")
    handle = _started_slow_step(app, db, 600)
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping: waiting up to 600 s" in worker.output(), 30, what="the stop")
    assert worker.proc.poll() is None  # still waiting for the slow step
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    assert handle.status() == perdure.RunStatus.QUEUED
    assert "run_released" in [e.event for e in app.history(handle.id)]
    # The slow step was entered once and did not finish: nothing was checkpointed.
    assert [s.name for s in app.steps(handle.id)] == ["first"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_log_level_metrics_host_and_stats_file_options(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, tmp_path: Path
) -> None:
    stats = tmp_path / "stats.json"
    port = _free_port()
    worker = spawn_worker(
        TARGET,
        "--log-level",
        "debug",
        "--metrics-port",
        str(port),
        "--metrics-host",
        "127.0.0.1",
        "--stats-file",
        str(stats),
    )
    handle = _started_slow_step(app, db, 0)
    assert handle.result(timeout=60)["first"] == worker.pid

    # Metrics are served on the host and port given.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert b"perdure_" in answer.read()

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert "DEBUG" in worker.output()
    counts = json.loads(stats.read_text())
    assert isinstance(counts, dict) and counts and all(isinstance(v, int) for v in counts.values())


def test_a_worker_at_warning_level_logs_no_info_lines(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    worker = spawn_worker(TARGET, "--log-level", "warning")
    handle = _started_slow_step(app, db, 0)
    handle.result(timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert "stopped" not in worker.output() and "INFO" not in worker.output()
