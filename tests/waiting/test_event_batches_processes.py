"""Event batches across real processes: two emitters and two workers, and SIGKILLs.

Each event must be in exactly one batch run's input, counted from the
database, whatever the emitters and workers race or lose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

import psycopg

import perdure
from helpers import TESTS_DIR, wait_until

TARGET = "apps.batch_app:app"

# Emits ``count`` tick events (numbered from ``base``) in their own
# transactions; with ``hold``, emits them in one transaction, says "held", and
# waits to be killed before it commits.
EMITTER = """
import os, sys, time, psycopg, perdure
base, count, hold = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "hold"
app = perdure.App(os.environ["PERDURE_DATABASE_URL"], schema=os.environ["PERDURE_SCHEMA"])
if hold:
    conn = psycopg.connect(os.environ["PERDURE_DATABASE_URL"])
    for n in range(base, base + count):
        app.emit("tick", {"n": n}, conn=conn)
    print("held", flush=True)
    time.sleep(600)
for n in range(base, base + count):
    app.emit("tick", {"n": n})
app.close()
"""


def _emitter(pg_url: str, schema: str, base: int, count: int, hold: bool = False) -> Any:
    env = dict(os.environ)
    env.update(PERDURE_DATABASE_URL=pg_url, PERDURE_SCHEMA=schema)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", EMITTER, str(base), str(count), "hold" if hold else "go"],
        env=env,
        stdout=subprocess.PIPE if hold else subprocess.DEVNULL,
        text=True,
    )


def _batched(db: psycopg.Connection[Any]) -> Counter[int]:
    """How many batch runs' inputs hold each event."""
    rows = db.execute(
        "SELECT (e ->> 'id')::bigint FROM runs r, jsonb_array_elements(r.input) e "
        "WHERE r.workflow = 'tally'"
    ).fetchall()
    return Counter(row[0] for row in rows)


def _emitted(db: psycopg.Connection[Any]) -> list[int]:
    return [r[0] for r in db.execute("SELECT id FROM emitted_events ORDER BY id").fetchall()]


def _all_done(db: psycopg.Connection[Any]) -> bool:
    (open_runs,) = db.execute(
        "SELECT count(*) FROM runs WHERE workflow = 'tally' AND status <> 'completed'"
    ).fetchone()  # type: ignore[misc]
    return open_runs == 0


def test_two_emitters_and_two_workers_put_500_events_in_exactly_one_batch_each(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    db.execute("CREATE TABLE batch_ledger (run_id uuid, event_ids bigint[], pid int)")
    workers = [spawn_worker(TARGET, "--concurrency", "4", "--poll-seconds", "0.2") for _ in "ab"]
    wait_until(lambda: any(w.name == "tally" for w in app.workflows()), 30, what="registration")
    wait_until(
        lambda: all(
            "started by events: tally on tick (batches of 10 / 0.3s)" in w.output() for w in workers
        ),
        30,
        what="the start-up lines",
    )
    emitters = [_emitter(pg_url, schema, base, 250) for base in (0, 1000)]
    for proc in emitters:
        assert proc.wait(timeout=120) == 0
    emitted = _emitted(db)
    assert len(emitted) == 500
    wait_until(lambda: _all_done(db), 60, what="every batch to complete")
    batched = _batched(db)
    assert sorted(batched) == emitted and set(batched.values()) == {1}
    sizes = [len(r[0]) for r in db.execute("SELECT event_ids FROM batch_ledger").fetchall()]
    assert sum(sizes) == 500 and max(sizes) <= 10
    # Each batch run recorded its batch once (nothing crashed).
    (runs, recorded) = db.execute(
        "SELECT (SELECT count(*) FROM runs WHERE workflow = 'tally'), "
        "count(DISTINCT run_id) FROM batch_ledger"
    ).fetchone()  # type: ignore[misc]
    assert runs == recorded == len(sizes)


def test_a_worker_and_an_emitter_killed_mid_batch_lose_and_double_no_event(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    db.execute("CREATE TABLE batch_ledger (run_id uuid, event_ids bigint[], pid int)")
    first = spawn_worker(
        TARGET, "--concurrency", "2", "--lease-seconds", "2", BATCH_STEP_SECONDS="30"
    )
    wait_until(lambda: any(w.name == "tally" for w in app.workflows()), 30, what="registration")
    # An emitter killed inside its transaction, its events in the open batch.
    held = _emitter(pg_url, schema, 500, 3, hold=True)
    assert held.stdout is not None and held.stdout.readline().strip() == "held"
    for n in range(10):
        app.emit("tick", {"n": n})
    held.send_signal(signal.SIGKILL)
    held.wait(timeout=10)
    held.stdout.close()
    # The batches (full, or their window ended) start on the worker, which
    # records each and dies in its step.
    wait_until(
        lambda: db.execute("SELECT count(*) FROM batch_ledger").fetchone() != (0,),
        30,
        what="a batch's step",
    )
    first.kill()
    for n in range(10, 25):
        app.emit("tick", {"n": n})
    second = spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
    wait_until(lambda: _all_done(db), 60, what="every batch to complete")
    emitted = _emitted(db)
    assert len(emitted) == 25  # the killed emitter's three never happened
    batched = _batched(db)
    assert sorted(batched) == emitted and set(batched.values()) == {1}
    # Each batch cut short ran again on the second worker, with the same events.
    cut = [
        r[0]
        for r in db.execute(
            "SELECT DISTINCT run_id FROM batch_ledger WHERE pid = %s", (first.pid,)
        ).fetchall()
    ]
    assert cut
    for run_id in cut:
        handle = app.handle(str(run_id))
        assert handle.result(timeout=10) == [e["id"] for e in handle.get().input]
        pids = [
            r[0]
            for r in db.execute(
                "SELECT pid FROM batch_ledger WHERE run_id = %s", (run_id,)
            ).fetchall()
        ]
        assert sorted(pids) == sorted([first.pid, second.pid])
