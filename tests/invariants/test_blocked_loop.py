"""A step that blocks its worker's event loop costs time, never the run.

Workers are `perdure worker` subprocesses with a short lease; the step calls
``time.sleep`` in an ``async def`` for three leases. Heartbeats go out from the
worker's own thread, so no other worker takes the run over, and the worker
says which run and which step blocked it.
"""

from __future__ import annotations

from typing import Any

import psycopg

import perdure
from helpers import wait_until

TARGET = "apps.blocking_app:app"
LEASE = 2.0


def test_an_async_step_that_blocks_for_three_leases_runs_once(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    args = ["--concurrency", "2", "--lease-seconds", str(LEASE), "--poll-seconds", "0.2"]
    workers = [spawn_worker(TARGET, *args) for _ in range(2)]
    wait_until(
        lambda: any(w.name == "blocker" for w in app.workflows()),
        30,
        what="a worker to register its workflows",
    )
    handle = app.start("blocker", 3 * LEASE)
    pid = handle.result(timeout=120)

    rows = db.execute("SELECT pid FROM ledger WHERE run_id = %s", (handle.id,)).fetchall()
    assert [r[0] for r in rows] == [pid], "the blocked step ran more than once"
    assert handle.status() == "completed"
    assert not any(e.event == "lease_expired" for e in app.history(handle.id))
    runner = next(w for w in workers if w.pid == pid)
    wait_until(lambda: "event loop was blocked" in runner.output(), 30, what="the end of the stall")
    output = runner.output()
    assert "event loop is blocked" in output
    assert f"run {handle.id} (step block)" in output
