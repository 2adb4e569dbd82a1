"""Parallel steps, graphs and sagas across real worker processes, with SIGKILL.

Workers are `perdure worker` subprocesses serving tests/apps/parallel_app.py,
whose steps record each execution (pid, start and end times) in a ledger.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

import perdure
from helpers import wait_until

TARGET = "apps.parallel_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


@pytest.fixture
def ledger(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute(
        "CREATE TABLE ledger (id serial PRIMARY KEY, run_id uuid, step text, pid int, "
        "started timestamptz, finished timestamptz)"
    )
    return db


def _start(app: perdure.App, workflow: str, input: Any) -> perdure.RunHandle:
    wait_until(
        lambda: any(w.name == workflow for w in app.workflows()),
        30,
        what="a worker to register its workflows",
    )
    return app.start(workflow, input)


def _rows(db: psycopg.Connection[Any], run_id: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT step, pid, started, finished FROM ledger WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()


def test_diamond_runs_b_and_c_at_once_on_different_workers(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    workers = [spawn_worker(TARGET, "--concurrency", "1", *SHORT_LEASE) for _ in range(3)]
    handle = _start(app, "diamond", 1.5)
    output = handle.result(timeout=60)

    rows = {
        step: (pid, started, finished) for step, pid, started, finished in _rows(ledger, handle.id)
    }
    assert set(rows) == {"a", "b", "c", "d"}
    (b_pid, b_start, b_end), (c_pid, c_start, c_end) = rows["b"], rows["c"]
    assert b_start < c_end and c_start < b_end, "b and c did not overlap in time"
    assert b_pid != c_pid, "one worker of concurrency 1 cannot run both at once"
    assert {b_pid, c_pid} <= {w.pid for w in workers}
    assert rows["d"][1] >= max(b_end, c_end), "d started before both inputs were ready"
    assert output == {"d": {"b": {"b": b_pid}, "c": {"c": c_pid}}}


def test_map_of_50_items_survives_a_sigkilled_worker(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    victim = spawn_worker(TARGET, "--concurrency", "4", *SHORT_LEASE)
    others = [spawn_worker(TARGET, "--concurrency", "4", *SHORT_LEASE) for _ in range(2)]
    handle = _start(app, "fan_out", {"items": 50, "seconds": 0.4})

    def victim_mid_item() -> bool:
        (n,) = ledger.execute(
            "SELECT count(*) FROM ledger WHERE pid = %s AND finished IS NULL", (victim.pid,)
        ).fetchone()
        (done,) = ledger.execute(
            "SELECT count(*) FROM ledger WHERE finished IS NOT NULL"
        ).fetchone()
        return n > 0 and done >= 8

    wait_until(victim_mid_item, 60, what="the victim to be mid-way through an item")
    victim.kill()
    output = handle.result(timeout=90)
    assert output == [i * i for i in range(50)]

    steps = [s for s in app.steps(handle.id) if s.name.startswith("square[")]
    assert len(steps) == 50 and all(s.status == perdure.StepStatus.COMPLETED for s in steps)
    completed = Counter(e.step_name for e in app.history(handle.id) if e.event == "step_completed")
    assert all(completed[f"square[{i}]"] == 1 for i in range(50)), "an item checkpointed twice"
    runs = Counter(step for step, *_ in _rows(ledger, handle.id))
    again = [step for step, n in runs.items() if n > 1]
    assert again, "the kill interrupted no item: the test proved nothing"
    for step in again:
        pids = [pid for s, pid, *_ in _rows(ledger, handle.id) if s == step]
        assert len(pids) == 2 and pids[0] == victim.pid, f"{step} re-ran without a crash"
    assert {pid for _, pid, *_ in _rows(ledger, handle.id)} & {w.pid for w in others}


@pytest.mark.timeout(300)  # about 30 s; more on a machine shared with other test runs
def test_map_of_10000_items_across_3_workers_survives_a_sigkill_mid_map(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, tmp_path: Any
) -> None:
    notes = tmp_path / "notes"
    notes.touch()
    workers = [
        spawn_worker(TARGET, "--concurrency", "16", *SHORT_LEASE, PERDURE_TEST_NOTES=str(notes))
        for _ in range(3)
    ]
    handle = _start(app, "wide_map", 10_000)

    def executions(ended: bool = False) -> list[tuple[int, int]]:
        lines = notes.read_text().splitlines()
        if not ended:
            lines = lines[:-1]  # the last line may be mid-write
        return [(int(pid), int(item)) for pid, item in (line.split() for line in lines)]

    wait_until(lambda: len(executions()) >= 2000, 60, what="2,000 items to run")
    # The busiest worker is the one running the map's batches: kill it mid-map.
    busiest = Counter(pid for pid, _ in executions()).most_common(1)[0][0]
    victim = next(w for w in workers if w.pid == busiest)
    victim.kill()
    killed_at = len(notes.read_text().splitlines())
    assert killed_at < 10_000, "the map ended before the kill: the test proved nothing"
    assert handle.result(timeout=120) == list(range(10_000))

    (completed,) = db.execute(
        "SELECT count(*) FROM steps WHERE run_id = %s AND name LIKE 'note[%%' "
        "AND status = 'completed'",
        (handle.id,),
    ).fetchone()
    assert completed == 10_000
    twice_checkpointed = db.execute(
        "SELECT step_name FROM history WHERE run_id = %s AND event = 'step_completed' "
        "GROUP BY step_name HAVING count(*) > 1",
        (handle.id,),
    ).fetchall()
    assert twice_checkpointed == []
    ran = executions(ended=True)
    by_item: dict[int, list[int]] = {}
    for pid, item in ran:
        by_item.setdefault(item, []).append(pid)
    assert set(by_item) == set(range(10_000))
    again = {item: pids for item, pids in by_item.items() if len(pids) > 1}
    # Only the victim's items in flight ran twice: its batch (at most 128 of
    # the map's steps) and what its claim loop held (at most its concurrency).
    assert all(len(pids) == 2 and pids[0] == victim.pid for pids in again.values()), again
    assert len(again) <= 128 + 16


@pytest.mark.parametrize("workflow", ["saga", "saga_fn"])
def test_saga_compensates_3_2_1_once_each_across_a_crash(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any, workflow: str
) -> None:
    victim = spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    handle = _start(app, workflow, {"undo_seconds": 1.0})

    def undoing_s2() -> bool:
        return any(step == "undo_s2" for step, *_ in _rows(ledger, handle.id))

    wait_until(undoing_s2, 60, what="the compensation of s2 to start")
    victim.kill()
    assert handle.get().status == perdure.RunStatus.COMPENSATING
    rescuer = spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    with pytest.raises(perdure.RunFailed) as info:
        handle.result(timeout=60)
    assert info.value.status == "compensated"

    rows = _rows(ledger, handle.id)
    forward = [step for step, *_ in rows if not step.startswith("undo")]
    undo = [(step, pid) for step, pid, *_ in rows if step.startswith("undo")]
    assert forward == ["s1", "s2", "s3", "s4"]
    assert [step for step, _ in undo] == ["undo_s3", "undo_s2", "undo_s2", "undo_s1"]
    assert undo[0][1] == undo[1][1] == victim.pid
    assert undo[2][1] == undo[3][1] == rescuer.pid
    completed = Counter(e.step_name for e in app.history(handle.id) if e.event == "step_completed")
    compensations = [name for name in completed if "undo" in name or "compensate" in name]
    assert len(compensations) == 3 and all(completed[n] == 1 for n in compensations)
