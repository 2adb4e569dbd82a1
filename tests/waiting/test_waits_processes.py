"""Waits across real worker processes: a sleep outlives its worker; the CLI wakes runs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
from click.testing import CliRunner

import perdure
from helpers import wait_until
from perdure.cli.main import cli

TARGET = "apps.crash_app:app"


def _ledger(db: psycopg.Connection[Any]) -> Counter[str]:
    return Counter(r[0] for r in db.execute("SELECT step FROM ledger").fetchall())


def test_a_sleep_survives_its_only_worker_and_resumes_after_the_wake_time(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    first = spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
    wait_until(lambda: any(w.name == "sleepy" for w in app.workflows()), 30, what="registration")
    handle = app.start("sleepy", {"sleep": 2})
    wait_until(lambda: handle.status() == "waiting", 30, what="the run to sleep")
    wake_at = handle.get().waiting_for["until"]  # type: ignore[index]
    first.kill()
    # No worker at all while the sleep runs out.
    wait_until(
        lambda: db.execute("SELECT now() > %s::timestamptz", (wake_at,)).fetchone() == (True,),
        10,
        what="the wake time to pass",
    )
    second = spawn_worker(TARGET, "--concurrency", "2")
    output = handle.result(timeout=60)
    assert output == {"before": first.pid, "after": second.pid}
    assert _ledger(db) == {"before": 1, "after": 1}
    sleep = next(s for s in app.steps(handle.id) if s.kind == "sleep")
    assert sleep.status == "completed" and sleep.duration is not None and sleep.duration >= 2


def test_the_cli_signals_pauses_and_resumes_runs(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    spawn_worker(TARGET, "--concurrency", "2")
    wait_until(lambda: any(w.name == "approve" for w in app.workflows()), 30, what="registration")
    handle = app.start("approve", {}, key="approve:1")
    wait_until(lambda: handle.status() == "waiting", 30, what="the wait")
    runner = CliRunner()
    base = ["--database-url", pg_url, "--schema", schema, "runs"]
    shown = runner.invoke(cli, [*base, "show", "approve:1"])
    assert "waiting for" in shown.output and "approval" in shown.output
    paused = runner.invoke(cli, [*base, "pause", "approve:1"])
    assert paused.exit_code == 0 and "paused" in paused.output
    sent = runner.invoke(
        cli, [*base, "signal", "approve:1", "approval", "--data", '{"ok": true}', "--key", "k1"]
    )
    assert sent.exit_code == 0, sent.output
    bad = runner.invoke(cli, [*base, "signal", "approve:1", "approval", "--data", "{nope"])
    assert bad.exit_code != 0 and "not valid JSON" in bad.output
    # Paused: the signal is kept, the run is not claimed.
    assert handle.status() == "paused"
    resumed = runner.invoke(cli, [*base, "resume", "approve:1"])
    assert resumed.exit_code == 0, resumed.output
    assert handle.result(timeout=30) == {"ok": True}
    finished = runner.invoke(cli, [*base, "signal", "approve:1", "approval"])
    assert finished.exit_code == 1 and "Error: InvalidRunState" in finished.output
