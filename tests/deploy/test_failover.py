"""A failover under load: the primary dies, its synchronous standby is promoted.

Workers and the client use a URL naming both servers with
``target_session_attrs=read-write``. Mid-workload the primary is stopped with
``-m immediate`` and the standby promoted. Every run completes, no checkpoint
is lost, each ``ctx.transaction`` effect is committed exactly once, the
workers are the same processes from start to end, and clients that were
waiting in ``result`` (sync and async) during the outage get their results.
The time from promotion to the first step executed on the new primary is
printed (docs/deploying.md quotes it).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import perdure
from apps import chaos_app
from chaos import checker
from chaos.faults import Fault
from deploy.replicated import ReplicatedPair
from helpers import WorkerProcess, wait_until

SCHEMA = "failover"
RUNS_BEFORE = 60
RUNS_AFTER = 20
LEASE = 5.0


@pytest.mark.timeout(300)
def test_a_failover_mid_workload_loses_and_repeats_nothing(pair: ReplicatedPair) -> None:
    app = perdure.App(pair.url, schema=SCHEMA, pool_size=4)
    workers: list[WorkerProcess] = []
    try:
        app.ensure_schema()
        with psycopg.connect(pair.url, autocommit=True) as conn:
            for ddl in chaos_app.LEDGER_DDL:
                conn.execute(ddl.replace("{s}", SCHEMA))
        args = ["--concurrency", "6", "--lease-seconds", str(LEASE), "--shutdown-seconds", "1"]
        workers = [
            WorkerProcess.start("apps.chaos_app:app", pair.url, SCHEMA, args, {}) for _ in range(3)
        ]
        pids = [w.pid for w in workers]
        wait_until(
            lambda: {w.name for w in app.workflows()} >= set(chaos_app.STEPS),
            60,
            what="the workers to register",
        )
        rng = random.Random(5)
        keys: list[str] = []
        signalled: list[str] = []

        def start(n: int) -> None:
            workflow = rng.choice(list(chaos_app.STEPS))
            params = {"work": round(rng.uniform(0.05, 0.4), 2), "sleep": rng.uniform(0.2, 2.0)}
            key = f"failover-{n}"
            _keyed(lambda: app.start(workflow, params, key=key))
            keys.append(key)
            if workflow == "chaos_signal":
                signalled.append(key)

        for n in range(RUNS_BEFORE):
            start(n)
        # Clients that wait through the outage: a signal run only finishes
        # after its signal, which is sent once the standby is promoted.
        waited = app.start("chaos_signal", {"work": 0.05, "sleep": 0.1}, key="waited")
        keys.append("waited")
        answers: dict[str, Any] = {}

        def wait_sync() -> None:
            answers["sync"] = waited.result(timeout=240)

        def wait_async() -> None:
            answers["async"] = asyncio.run(waited.result_async(timeout=240))

        waiters = [threading.Thread(target=f, daemon=True) for f in (wait_sync, wait_async)]
        for thread in waiters:
            thread.start()
        # Mid-workload: some runs done, others in flight.
        wait_until(
            lambda: _count(pair.primary.url, "SELECT count(*) FROM failover.chaos_ledger") >= 40,
            60,
            what="the workload to be under way",
        )
        went_down = time.time()
        pair.stop_immediately(pair.primary)
        pair.promote()
        promoted = pair.promoted_at()
        for n in range(RUNS_BEFORE, RUNS_BEFORE + RUNS_AFTER):
            start(n)
        for key in [*signalled, "waited"]:
            _keyed(lambda k=key: app.signal(k, "go", {"key": k}, key="go"))
        for thread in waiters:
            thread.join(240)
        assert answers.get("sync") == {"key": "waited"}, answers
        assert answers.get("async") == {"key": "waited"}, answers
        wait_until(
            lambda: (
                not _count(
                    pair.url, f"SELECT count(*) FROM {SCHEMA}.runs WHERE status <> 'completed'"
                )
            ),
            180,
            interval=0.25,
            what="every run to complete",
        )
        completed = time.time()
        first_after = _value(
            pair.url,
            f"SELECT extract(epoch FROM min(started)) FROM {SCHEMA}.chaos_ledger"
            " WHERE started > to_timestamp(%s)",
            promoted,
        )
        first_checkpoint = _value(
            pair.url,
            f"SELECT extract(epoch FROM min(at)) FROM {SCHEMA}.history"
            " WHERE event = 'step_completed' AND at > to_timestamp(%s)",
            promoted,
        )
        print(
            f"\nfailover: standby promoted {promoted - went_down:.2f} s after the primary "
            f"stopped; after promotion: first step began {float(first_after) - promoted:.2f} s, "
            f"first checkpoint committed {float(first_checkpoint) - promoted:.2f} s, "
            f"every run completed {completed - promoted:.1f} s"
        )
        assert [w.pid for w in workers if w.proc.poll() is None] == pids, "a worker exited"
        with psycopg.connect(pair.url, autocommit=True) as conn:
            report = checker.check(
                conn,
                SCHEMA,
                keys=keys,
                expected_steps=chaos_app.STEPS,
                faults=[Fault("failover", went_down, promoted, None, "primary stopped")],
                aftershock=LEASE * 2 + 10.0,
                live_double_claims=[],
            )
        print("\n".join(report.lines()))
        broken = [(inv.name, inv.violations[:5]) for inv in report.invariants if not inv.ok]
        assert not broken, broken
    finally:
        app.close()
        for worker in workers:
            worker.kill()
            print(f"--- worker {worker.pid} ---\n{worker.output()[-3000:]}")


def _keyed(call: Callable[[], object], timeout: float = 60.0) -> None:
    """Make a keyed call, again while the database is unavailable (as the docs advise):
    a call that does not wait raises at once when its connection was cut, and a
    key makes it safe to repeat."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except perdure.DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _value(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def _count(url: str, query: str) -> int:
    return int(_value(url, query) or 0)
