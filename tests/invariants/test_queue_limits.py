"""A queue's concurrency limit holds across real worker processes.

Four `perdure worker` subprocesses serve tests/apps/queue_app.py, whose queue
"media" allows 2 tasks at once in all and 1 per worker. Every step execution
logs its entry and exit in a ledger table; replaying the ledger in id order
gives how many were inside at once. A slot is given back only after the exit
was logged (the run completes after its step returns), so the replay never
overstates the real concurrency, and two overlapping entries in it did
overlap.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from helpers import wait_until

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

TARGET = "apps.queue_app:app"
RUNS = 12

MOST_INSIDE = """
SELECT coalesce(max(inside), 0) FROM (
    SELECT sum(CASE event WHEN 'enter' THEN 1 ELSE -1 END)
               OVER (PARTITION BY CASE WHEN %s THEN pid END ORDER BY id) AS inside
    FROM ledger
) replay
"""


def test_a_queue_limit_holds_under_four_worker_processes(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (id bigserial PRIMARY KEY, run_id uuid, event text, pid int)")
    workers = [
        spawn_worker(TARGET, "--concurrency", "4", "--poll-seconds", "0.2") for _ in range(4)
    ]
    wait_until(
        lambda: sum(w.status == "running" for w in app.workers()) == 4,
        60,
        what="four workers to serve",
    )
    # Every worker is idle and listening: the burst of starts wakes them all
    # at once, and their claims race for the two slots.
    handles = [app.start("encode", 0.3) for _ in range(RUNS)]
    pids = [h.result(timeout=120) for h in handles]

    events = db.execute("SELECT event, count(*), count(DISTINCT run_id) FROM ledger GROUP BY 1")
    assert sorted(events.fetchall()) == [("enter", RUNS, RUNS), ("exit", RUNS, RUNS)]
    overall = db.execute(MOST_INSIDE, (False,)).fetchone()
    per_worker = db.execute(MOST_INSIDE, (True,)).fetchone()
    assert overall == (2,), f"at most 2 at once, and 2 reached: {overall}"
    assert per_worker == (1,), f"at most 1 per worker: {per_worker}"
    assert set(pids) <= {w.pid for w in workers} and len(set(pids)) >= 2
    queue = next(q for q in app.queues() if q.name == "media")
    assert (queue.concurrency, queue.worker_concurrency, queue.running) == (2, 1, 0)
