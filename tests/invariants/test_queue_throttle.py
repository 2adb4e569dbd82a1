"""Rate limits, priority and partition keys hold across real worker processes.

Three `perdure worker` subprocesses serve tests/apps/throttle_app.py. Every
step writes to a ledger table what it saw (see that module): the moment its
task was claimed, or its entry and exit with its partition key. The checks
read the ledger, so they measure what the workers did.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import perdure
from apps import throttle_app
from helpers import wait_until

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

TARGET = "apps.throttle_app:app"
LEDGER = (
    "CREATE TABLE ledger (id bigserial PRIMARY KEY, run_id uuid, event text, key text, "
    "at timestamptz, pid int)"
)
# Twelve runs, their priorities in the order they are started.
PRIORITIES = [0, 5, 0, 10, 5, 0, 10, 1, 0, 5, 1, 10]


@pytest.fixture
def local(make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]) -> perdure.App:
    """An App with the same workflows and queue settings, registered before any worker starts."""
    db.execute(LEDGER)
    app = make_app()
    throttle_app.define(app)
    app.register()
    return app


def start_workers(app: perdure.App, spawn_worker: Any, count: int = 3) -> list[Any]:
    """Start ``count`` worker processes and wait until all serve."""
    workers = [
        spawn_worker(TARGET, "--concurrency", "4", "--poll-seconds", "0.2") for _ in range(count)
    ]
    wait_until(
        lambda: sum(w.status == "running" for w in app.workers()) == count,
        60,
        what=f"{count} workers to serve",
    )
    return workers


def expected_order(handles: list[perdure.RunHandle]) -> dict[str, int]:
    """Each run's place in priority order: higher first, first started first within one."""
    ranked = sorted(range(len(handles)), key=lambda i: (-PRIORITIES[i], i))
    return {handles[i].id: place for place, i in enumerate(ranked)}


def test_rate_limit_and_priority_hold_under_three_worker_processes(
    local: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    # Every run is ready before any worker starts, so priority decides alone.
    handles = [local.start("metered", i, priority=p) for i, p in enumerate(PRIORITIES)]
    workers = start_workers(local, spawn_worker)
    pids = [h.result(timeout=120) for h in handles]

    claims = db.execute("SELECT run_id, at FROM ledger WHERE event = 'claimed' ORDER BY at")
    rows = [(str(run_id), at) for run_id, at in claims.fetchall()]
    assert len(rows) == len(handles) and {r for r, _ in rows} == {h.id for h in handles}
    count, period = throttle_app.RATE
    times = [at for _, at in rows]
    # At most 3 claims in any one-second window, across all workers...
    for first, last in zip(times, times[count:], strict=False):
        assert last - first >= timedelta(seconds=period), (first, last)
    # ...and the budget is used: some window holds a full budget of claims
    # (a limit read as "less than 3" would never fill one).
    assert any(
        last - first < timedelta(seconds=period)
        for first, last in zip(times, times[count - 1 :], strict=False)
    ), times
    # Higher priority is claimed first, first started first within a priority.
    # Tasks claimed in one batch share their claim's moment: only claims at
    # different moments are ordered.
    place = expected_order(handles)
    for run_a, at_a in rows:
        for run_b, at_b in rows:
            if at_a < at_b:
                assert place[run_a] < place[run_b], "a lower-priority run was claimed first"
    # Which worker wins each window is a race (one may win them all): the
    # limit must hold whoever claims, so only the claimants are checked.
    assert set(pids) <= {w.pid for w in workers}


def test_priority_orders_a_queue_claimed_one_at_a_time(
    local: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    handles = [local.start("ordered", i, priority=p) for i, p in enumerate(PRIORITIES)]
    start_workers(local, spawn_worker)
    for handle in handles:
        handle.result(timeout=120)
    entered = [str(r) for (r,) in db.execute("SELECT run_id FROM ledger ORDER BY id").fetchall()]
    place = expected_order(handles)
    assert entered == sorted(place, key=place.__getitem__)


MOST_INSIDE = """
SELECT key, max(inside) FROM (
    SELECT key, sum(CASE event WHEN 'enter' THEN 1 ELSE -1 END)
               OVER (PARTITION BY key ORDER BY id) AS inside
    FROM ledger
) replay GROUP BY key ORDER BY key
"""


def test_partition_keys_run_one_at_a_time_and_a_backlog_starves_no_key(
    local: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    # Customer a's backlog (8 runs of 1 s, one at a time) is queued first; b
    # and c (0.3 s runs) come after it.
    jobs = [("a", 1.0)] * 8 + [("b", 0.3), ("c", 0.3)] * 2
    handles = [
        local.start("parted", {"key": key, "seconds": s}, partition_key=key) for key, s in jobs
    ]
    start_workers(local, spawn_worker)
    for handle in handles:
        handle.result(timeout=120)

    assert db.execute(MOST_INSIDE).fetchall() == [("a", 1), ("b", 1), ("c", 1)]
    entered = db.execute(
        "SELECT key, array_agg(id ORDER BY id) FROM ledger WHERE event = 'enter' GROUP BY key"
    ).fetchall()
    first = {key: ids for key, ids in entered}
    # b and c ran alongside a's backlog, not after it: all four had begun
    # before a's sixth run did (about 1.2 s of their work against 5 s of a's).
    assert max(first["b"] + first["c"]) < first["a"][5]
    overall = db.execute(
        "SELECT max(inside) FROM (SELECT sum(CASE event WHEN 'enter' THEN 1 ELSE -1 END) "
        "OVER (ORDER BY id) AS inside FROM ledger) replay"
    ).fetchone()
    assert overall is not None and overall[0] >= 2, "keys did not run side by side"
