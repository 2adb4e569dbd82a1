"""SIGKILL while a completed step's checkpoint is held for the workflow's next await.

A step's checkpoint is written when the workflow next yields (engine/deferred.py).
The workflow of tests/apps/crash_app.py named ``held`` blocks its worker's loop
right after a step returned, so the checkpoint is held, not written, when the
worker is killed. Either it committed with a later write, or the step runs
again on replay: never two checkpoints, and a transaction step's effect once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

import perdure
from helpers import wait_until

TARGET = "apps.crash_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


@pytest.fixture
def ledger(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    db.execute("CREATE TABLE tx_ledger (run_id uuid, pid int)")
    return db


def executions(db: psycopg.Connection[Any], run_id: str) -> Counter[str]:
    """How many times each step of ``run_id`` began, from the ledger."""
    rows = db.execute("SELECT step FROM ledger WHERE run_id = %s", [run_id]).fetchall()
    return Counter(r[0] for r in rows)


def checkpoints(db: psycopg.Connection[Any], run_id: str) -> list[tuple[str, str]]:
    """The run's step rows, (name, status), in position order."""
    found = db.execute(
        "SELECT name, status FROM steps WHERE run_id = %s ORDER BY position", [run_id]
    ).fetchall()
    return [(r[0], r[1]) for r in found]


@pytest.mark.parametrize(
    ("pause", "committed", "again"),
    [
        # Killed while a's checkpoint is held: nothing was written, a runs again.
        ("after-a", [], "a"),
        # Killed while b's is held: a's went before the transaction, which
        # committed its own; b runs again, the transaction does not.
        ("after-b", [("a", "completed"), ("record", "completed")], "b"),
    ],
)
def test_a_held_checkpoint_is_committed_or_its_step_runs_again(
    app: perdure.App,
    ledger: psycopg.Connection[Any],
    spawn_worker: Any,
    pause: str,
    committed: list[tuple[str, str]],
    again: str,
) -> None:
    victim = spawn_worker(TARGET, *SHORT_LEASE, PERDURE_TEST_PAUSE_AT=pause)
    wait_until(lambda: any(w.name == "held" for w in app.workflows()), 30, what="registered")
    handle = app.start("held")
    wait_until(
        lambda: executions(ledger, handle.id)[f"paused@{pause}"] == 1,
        30,
        what="the worker to block with a checkpoint held",
    )
    victim.kill()
    assert checkpoints(ledger, handle.id) == committed

    rescuer = spawn_worker(TARGET, *SHORT_LEASE)
    output = handle.result(timeout=60)

    ran = executions(ledger, handle.id)
    assert ran[again] == 2, "the step whose checkpoint was lost runs again"
    assert all(ran[step] == 1 for step in {"a", "b", "c"} - {again})
    tx = ledger.execute("SELECT count(*) FROM tx_ledger WHERE run_id = %s", [handle.id])
    assert tx.fetchone() == (1,), "a transaction step committed twice"
    assert checkpoints(ledger, handle.id) == [
        ("a", "completed"),
        ("record", "completed"),
        ("b", "completed"),
        ("c", "completed"),
    ]
    assert output[again] == output["c"] == rescuer.pid
    events = [e.event for e in app.history(handle.id)]
    assert events.count("step_completed") == 4
