"""Attempts a crash ended, in the run page's timeline: a real worker SIGKILLed mid-step."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

import perdure
from helpers import wait_until
from perdure.dashboard import DashboardConfig, create_app

TARGET = "apps.crash_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


@pytest.fixture
def ledger(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The tables crash_app's steps write when they start."""
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    db.execute("CREATE TABLE tx_ledger (run_id uuid, pid int)")
    return db


def test_an_attempt_a_sigkill_ended_shows_on_its_step_with_how_it_ended(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    victim = spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    wait_until(lambda: any(w.name == "crashy" for w in app.workflows()), 30)
    run = app.start("crashy", {"slow": 3}, key="crashy:timeline")
    wait_until(
        lambda: ledger.execute("SELECT count(*) FROM ledger WHERE step = 'slow'").fetchone()[0],  # type: ignore[index]
        30,
        what="the run to be inside its slow step",
    )
    victim.kill()
    spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    run.result(timeout=60)
    slow = {s.name: s for s in app.steps(run.id)}["slow"]
    assert slow.attempts == 1  # the step row knows only the attempt that completed
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        page = client.get(f"/runs/{run.id}").text
    lane = re.search(r'<div class="lane" data-lane="slow">(.*?)</div>', page, re.S)
    assert lane is not None
    lost = re.findall(r'data-kind="lost"><title>(.*?)</title>', lane.group(1))
    assert len(lost) == 1, lane.group(1)
    assert "lease lapsed" in lost[0] and f"worker {victim_id(app, victim.pid)}" in lost[0]
    assert "step, 1 lost" in lane.group(1)
    # The other steps' lanes show no lost attempt: the crash was in "slow".
    for name in ("first", "record", "last"):
        other = re.search(rf'<div class="lane" data-lane="{name}">(.*?)</div>', page, re.S)
        assert other is not None and 'data-kind="lost"' not in other.group(1)


def victim_id(app: perdure.App, pid: int) -> str:
    """The worker id of process ``pid``."""
    return next(w.id for w in app.workers() if w.pid == pid)
