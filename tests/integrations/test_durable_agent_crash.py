"""A worker SIGKILLed in the middle of an agent's run: nothing that completed runs again.

The worker is a real ``perdure worker`` process running tests/apps/agent_app.py;
its model and tools count their executions in ``agent_ledger``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg

import perdure
from helpers import wait_until

TARGET = "apps.agent_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


def _counts(db: psycopg.Connection[Any], run_id: str) -> Counter[str]:
    rows = db.execute("SELECT call FROM agent_ledger WHERE run_id = %s", (run_id,)).fetchall()
    return Counter(r[0] for r in rows)


def test_sigkill_mid_agent_repeats_no_completed_model_request_or_tool_call(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE agent_ledger (run_id text, call text, pid int)")
    victim = spawn_worker(TARGET, "--concurrency", "1", *SHORT_LEASE, AGENT_SLOW_SECONDS="60")
    wait_until(
        lambda: any(w.name == "agent:forecaster" for w in app.registered_workflows()),
        60,
        what="the worker to register the agent's workflow",
    )
    handle = app.start("agent:forecaster", {"prompt": "Weather in Oslo?"})
    # The run is inside the slow tool: one model request and one tool call lie behind it.
    wait_until(lambda: _counts(db, handle.id)["tool:slow"] == 1, 60, what="the slow tool to start")
    victim.kill()
    rescuer = spawn_worker(TARGET, "--concurrency", "1", *SHORT_LEASE, AGENT_SLOW_SECONDS="0")
    result = handle.result(timeout=90)

    assert result["output"] == "Oslo: Oslo is in Norway, snow"
    counts = _counts(db, handle.id)
    assert counts == {
        "model:0": 1,  # completed before the kill: not repeated
        "tool:lookup": 1,  # completed before the kill: not repeated
        "model:1": 1,  # completed before the kill: not repeated
        "tool:slow": 2,  # cut short by the kill, so run again once
        "model:2": 1,  # after the rescue
    }, counts
    pids = dict(
        db.execute(
            "SELECT call, pid FROM agent_ledger WHERE run_id = %s AND call <> 'tool:slow'",
            (handle.id,),
        ).fetchall()
    )
    assert pids["model:0"] == pids["tool:lookup"] == pids["model:1"] == victim.pid
    assert pids["model:2"] == rescuer.pid
    events = [e.event for e in app.history(handle.id)]
    assert "lease_expired" in events
    kinds = [v["event"] for v in app.read_stream(handle.id, "events")]
    assert kinds == [
        "model_response",
        "tool_results",
        "model_response",
        "tool_results",
        "model_response",
        "output",
    ]
