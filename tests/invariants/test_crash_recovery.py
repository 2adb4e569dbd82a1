"""Invariants 2, 3, 4 and 7 with real processes: SIGKILL, SIGSTOP, many workers.

Workers here are `perdure worker` subprocesses. The ledger tables of
tests/apps/crash_app.py count how often each step really executed.
"""

from __future__ import annotations

import signal
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


def _counts(db: psycopg.Connection[Any]) -> Counter[tuple[str, str]]:
    rows = db.execute("SELECT run_id::text, step FROM ledger").fetchall()
    return Counter((r[0], r[1]) for r in rows)


def _tx_counts(db: psycopg.Connection[Any]) -> Counter[str]:
    return Counter(r[0] for r in db.execute("SELECT run_id::text FROM tx_ledger").fetchall())


@pytest.mark.all_servers
def test_sigkill_mid_step_resumes_on_another_worker(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    victim = spawn_worker(TARGET, "--concurrency", "4", *SHORT_LEASE)
    handles = [app_start(app, i, slow=4) for i in range(4)]
    # Every run is inside its slow step (its start is in the ledger): kill now.
    wait_until(
        lambda: sum(1 for (_, s) in _counts(ledger) if s == "slow") == 4,
        30,
        what="all runs to reach the slow step",
    )
    victim.kill()
    rescuer = spawn_worker(TARGET, "--concurrency", "4", *SHORT_LEASE)
    outputs = [h.result(timeout=60) for h in handles]

    counts = _counts(ledger)
    tx = _tx_counts(ledger)
    for handle, output in zip(handles, outputs, strict=True):
        run = handle.id
        assert counts[(run, "first")] == 1, "a committed step ran again"
        assert counts[(run, "slow")] == 2, "the interrupted step runs again, once"
        assert counts[(run, "last")] == 1
        assert tx[run] == 1, "a transaction step committed twice"
        assert output["first"] == victim.pid
        assert output["slow"] == output["record"] == output["last"] == rescuer.pid
        events = [e.event for e in app.history(run)]
        assert "lease_expired" in events
        assert events.count("step_completed") == 4


@pytest.mark.all_servers
def test_sigkill_inside_a_transaction_step_commits_it_exactly_once(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    victim = spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    handles = [app_start(app, i, tx_sleep=5) for i in range(2)]
    # Both transactions are open (their pg_sleep runs) when the worker dies.
    wait_until(
        lambda: (
            ledger.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%%'"
            ).fetchone()
            == (2,)
        ),
        30,
        what="both transaction steps to be open",
    )
    victim.kill()
    spawn_worker(TARGET, "--concurrency", "2", *SHORT_LEASE)
    for handle in handles:
        handle.result(timeout=60)
    tx = _tx_counts(ledger)
    assert all(tx[h.id] == 1 for h in handles), tx
    assert all(_counts(ledger)[(h.id, "first")] == 1 for h in handles)


@pytest.mark.all_servers
def test_a_stalled_worker_is_fenced_out_when_it_wakes(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    zombie = spawn_worker(TARGET, "--concurrency", "1", *SHORT_LEASE)
    handle = app_start(app, 0, slow=3)
    wait_until(lambda: _counts(ledger)[(handle.id, "slow")] == 1, 30, what="the slow step")
    zombie.signal(signal.SIGSTOP)
    try:
        owner = spawn_worker(TARGET, "--concurrency", "1", *SHORT_LEASE)
        # The new owner claimed the run (attempt 2) and started its slow step.
        wait_until(
            lambda: _counts(ledger)[(handle.id, "slow")] == 2,
            30,
            what="the new owner to start the slow step",
        )
    finally:
        zombie.signal(signal.SIGCONT)
    # The zombie's slow step ends at once (its sleep ran out while stopped) and
    # tries to checkpoint with attempt 1: the fence refuses it.
    wait_until(lambda: "lost its lease" in zombie.output(), 30, what="LeaseLost in the zombie")
    output = handle.result(timeout=60)
    assert output["slow"] == output["record"] == output["last"] == owner.pid
    steps = {s.name: s for s in app.steps(handle.id)}
    assert steps["slow"].attempts == 1
    assert steps["slow"].output == owner.pid
    completions = [e for e in app.history(handle.id) if e.event == "step_completed"]
    assert [e.step_name for e in completions] == ["first", "slow", "record", "last"]
    assert all(e.attempt == 1 for e in completions)
    assert "LeaseLost" in zombie.output() or "lost its lease" in zombie.output()


def test_four_workers_share_five_hundred_runs_without_duplicates(
    app: perdure.App, ledger: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    workers = [spawn_worker(TARGET, "--concurrency", "8") for _ in range(4)]
    app_start(app, 0)
    wait_until(lambda: any(w.name == "three" for w in app.workflows()), 30, what="three registered")
    handles = [app.start("three", i) for i in range(500)]
    for i, handle in enumerate(handles):
        assert handle.result(timeout=120) == i + 3
    counts = _counts(ledger)
    counts = Counter({k: v for k, v in counts.items() if k[1] in "abc"})
    assert len(counts) == 1500 and set(counts.values()) == {1}
    # Every run was claimed exactly once: no task was ever held by two workers.
    claims = ledger.execute(
        "SELECT h.run_id, count(*) FROM history h JOIN runs r ON r.id = h.run_id"
        " WHERE h.event = 'run_claimed' AND r.workflow = 'three' GROUP BY h.run_id"
    ).fetchall()
    assert len(claims) == 500 and {c[1] for c in claims} == {1}
    steps = ledger.execute(
        "SELECT count(*), count(DISTINCT (run_id, position)) FROM steps s"
        " JOIN runs r ON r.id = s.run_id WHERE r.workflow = 'three'"
    )
    assert steps.fetchone() == (1500, 1500)
    pids = {r[0] for r in ledger.execute("SELECT DISTINCT pid FROM ledger").fetchall()}
    assert pids <= {w.pid for w in workers} and len(pids) >= 2


def app_start(app: perdure.App, i: int, **params: float) -> perdure.RunHandle:
    """Start a run of crashy by name: this App has no code for it (trigger-only).

    It finds the workflow in the registry table once a worker has registered it.
    """
    wait_until(
        lambda: any(w.name == "crashy" for w in app.workflows()),
        30,
        what="a worker to register its workflows",
    )
    return app.start("crashy", params, key=f"crashy:{i}")
