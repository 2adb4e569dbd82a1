"""Exactly one run per tick across three real `perdure worker` processes.

The workers serve tests/apps/schedule_app.py, whose schedule "beat" ticks
every second. They all tick it from their maintenance loop at once; one of
them is SIGKILLed half-way. Every tick from the first to the last must have
exactly one run, with the tick's key, and each run reads its own tick.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg

import perdure
from helpers import wait_until
from perdure.engine.schedules import tick_key

TARGET = "apps.schedule_app:app"
TICKS = 10


def _runs(db: psycopg.Connection[Any]) -> list[tuple[str, str, Any, str]]:
    return db.execute(
        "SELECT id::text, key, scheduled_at, status FROM runs WHERE schedule = 'beat' "
        "ORDER BY scheduled_at"
    ).fetchall()


def test_three_worker_processes_start_exactly_one_run_per_tick(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    workers = [
        spawn_worker(TARGET, "--concurrency", "4", "--poll-seconds", "0.5", "--lease-seconds", "5")
        for _ in range(3)
    ]
    wait_until(
        lambda: sum(w.status == "running" for w in app.workers()) == 3, 60, what="three workers"
    )
    wait_until(lambda: len(_runs(db)) >= TICKS // 2, 60, what="the first ticks")
    workers[0].signal(signal.SIGKILL)
    wait_until(lambda: len(_runs(db)) >= TICKS, 60, what="ticks after the kill")
    app.pause_schedule("beat")
    wait_until(
        lambda: all(status == "completed" for *_, status in _runs(db)),
        60,
        what="every run to complete",
    )

    runs = _runs(db)
    ticks = [tick for _, _, tick, _ in runs]
    assert len(runs) >= TICKS
    assert Counter(ticks).most_common(1)[0][1] == 1, "a tick has two runs"
    assert len({key for _, key, _, _ in runs}) == len(runs)
    assert [key for _, key, _, _ in runs] == [tick_key("beat", tick) for tick in ticks]
    expected = [ticks[0] + timedelta(seconds=n) for n in range(len(ticks))]
    assert ticks == expected, "a tick between the first and the last has no run"
    for run_id, _, tick, _ in runs:
        assert app.get_run(run_id).output == tick.isoformat()

    # Each run was started by one worker, once: no id is logged as started twice.
    started = Counter(
        run_id
        for worker in workers
        for run_id in re.findall(r"schedule beat: started run (\S+) for", worker.output())
    )
    assert set(started) <= {run_id for run_id, *_ in runs}
    assert all(count == 1 for count in started.values()), started
    tickers = [w for w in workers if "schedule beat: started run" in w.output()]
    print(f"{len(runs)} ticks started by {len(tickers)} of the 3 workers")
