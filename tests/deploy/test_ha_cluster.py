"""A Patroni cluster under load: a planned switchover, then the new leader's postmaster killed.

etcd and Patroni manage three PostgreSQL 15 nodes with the settings
docs/operating.md gives (synchronous mode, a crashed primary fails over at
once). Workers and the client use the URL users would: every node, with
``target_session_attrs=read-write``. The chaos workload (steps, durable
sleeps, ``ctx.transaction`` steps, signals, gathers, maps, child runs, a
graph) runs through both events:

1. ``patronictl switchover --force`` to the synchronous standby;
2. SIGKILL of the new leader's postmaster: Patroni fails over to its standby.

Every run completes, no checkpoint is lost, each ``ctx.transaction`` effect
is committed exactly once (its table counts commits), the workers are the
same processes from start to end, clients waiting in ``result`` through each
event get their result, and no run records a lapse (``lease_expired``) for
the switchover. The times from each event to the new leader's promotion, to
the first step completed on it and to every run done are printed and written
to ``ha-timings.json`` in the test's temporary folder (docs/operating.md
quotes them).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import perdure
from apps import chaos_app
from chaos import checker
from chaos.faults import Fault
from deploy.patroni_cluster import PatroniCluster
from helpers import WorkerProcess, wait_until

SCHEMA = "ha_cluster"
#: Runs started before each event.
BEFORE = 30
#: Then one run every this many seconds until the new leader is known.
STREAM_GAP = 0.25
#: The worker's default lease: a lapse in the switchover would be a real one.
LEASE = 30.0


@pytest.mark.timeout(420)
def test_a_switchover_then_a_failover_lose_and_repeat_nothing(
    ha_cluster: PatroniCluster, tmp_path: Path
) -> None:
    url = ha_cluster.url
    app = perdure.App(url, schema=SCHEMA, pool_size=4)
    workers: list[WorkerProcess] = []
    try:
        app.ensure_schema()
        with psycopg.connect(url, autocommit=True) as conn:
            for ddl in chaos_app.LEDGER_DDL:
                conn.execute(ddl.replace("{s}", SCHEMA))
        args = ["--concurrency", "6", "--lease-seconds", str(LEASE), "--shutdown-seconds", "1"]
        workers = [
            WorkerProcess.start("apps.chaos_app:app", url, SCHEMA, args, {}) for _ in range(3)
        ]
        pids = [w.pid for w in workers]
        wait_until(
            lambda: {w.name for w in app.workflows()} >= set(chaos_app.STEPS),
            60,
            what="the workers to register",
        )
        workload = Workload(app, random.Random(28))
        faults: list[Fault] = []
        timings: dict[str, dict[str, float]] = {}
        for event in ("switchover", "failover"):
            timings[event], fault = _through(event, ha_cluster, workload, url)
            faults.append(fault)
            if event == "switchover":
                # The lapses the switchover caused would all be recorded by now:
                # every run it touched has completed.
                lapses = _lapses(url)
                assert not lapses, "leases lapsed in the planned switchover:\n" + "\n".join(lapses)
                # The next event needs a synchronous standby to fail over to.
                ha_cluster.wait_healthy(timeout=120)
        for event, figures in timings.items():
            print(
                f"\n{event}: outage began {figures['asked']:.2f} s after it was asked for; "
                f"new leader promoted {figures['promoted']:.2f} s after the outage began; "
                f"first step begun {figures['first_step_begun']:.2f} s, first step "
                f"completed {figures['first_step_completed']:.2f} s, every run done "
                f"{figures['all_done']:.1f} s"
            )
        (tmp_path / "ha-timings.json").write_text(json.dumps(timings, indent=2))
        lapsed = _lapses(url)
        print(f"timings in {tmp_path}")
        assert not lapsed, "leases lapsed in the failover:\n" + "\n".join(lapsed)
        assert [w.pid for w in workers if w.proc.poll() is None] == pids, "a worker exited"
        with psycopg.connect(url, autocommit=True) as conn:
            report = checker.check(
                conn,
                SCHEMA,
                keys=workload.keys,
                expected_steps=chaos_app.STEPS,
                faults=faults,
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


class Workload:
    """Starts chaos runs of every shape, keyed, and remembers which wait for a signal."""

    def __init__(self, app: perdure.App, rng: random.Random) -> None:
        """Start runs on ``app``, their shapes drawn from ``rng``."""
        self.app = app
        self.rng = rng
        self.keys: list[str] = []
        self.unsignalled: list[str] = []
        self._lock = threading.Lock()

    def start(self, shapes: list[str] | None = None) -> None:
        """Start one more run (a keyed start, repeated while the database is away)."""
        with self._lock:
            workflow = self.rng.choice(shapes or list(chaos_app.STEPS))
            params = {
                "work": round(self.rng.uniform(0.05, 0.4), 2),
                "sleep": self.rng.uniform(0.2, 2.0),
            }
            key = f"ha-{len(self.keys)}"
            self.keys.append(key)
            if workflow == "chaos_signal":
                self.unsignalled.append(key)
        _keyed(lambda: self.app.start(workflow, params, key=key))

    def stream(self, stop: threading.Event) -> threading.Thread:
        """Start runs that need no signal, one per STREAM_GAP s, until ``stop`` is set."""
        shapes = [w for w in chaos_app.STEPS if w != "chaos_signal"]

        def loop() -> None:
            while not stop.wait(STREAM_GAP):
                self.start(shapes)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    def signal_all(self) -> None:
        """Send ``go`` to every run waiting for it."""
        with self._lock:
            keys, self.unsignalled = self.unsignalled, []
        for key in keys:
            _keyed(lambda k=key: self.app.signal(k, "go", {"key": k}, key="go"))


def _through(
    event: str, cluster: PatroniCluster, workload: Workload, url: str
) -> tuple[dict[str, float], Fault]:
    """Run a batch through ``event``; its timings (s from the outage's start) and its fault.

    The outage starts when the old leader's server is told to stop (a
    switchover; ``patronictl`` itself takes a moment to start and ask) or
    when its postmaster is killed (a failover).
    """
    app = workload.app
    began = time.time()
    for _ in range(BEFORE):
        workload.start()
    # A client that waits through the event: its run finishes after its
    # signal, which is sent once the event is over.
    waited_key = f"waited-{event}"
    waited = app.start("chaos_signal", {"work": 0.05, "sleep": 0.1}, key=waited_key)
    workload.keys.append(waited_key)
    workload.unsignalled.append(waited_key)
    answers: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: answers.update(result=waited.result(timeout=300)), daemon=True
    )
    waiter.start()
    # New runs keep coming until the new leader is known.
    stop = threading.Event()
    streamer = workload.stream(stop)
    # Mid-workload: some steps of this batch done, others in flight.
    wait_until(
        lambda: (
            _count(
                url,
                f"SELECT count(*) FROM {SCHEMA}.chaos_ledger WHERE started > to_timestamp(%s)",
                began,
            )
            >= 20
        ),
        90,
        interval=0.1,
        what=f"the workload to be under way before the {event}",
    )
    old = cluster.leader()
    assert old is not None, cluster.state()
    asked = time.time()
    if event == "switchover":
        candidate = cluster.sync_standby()
        assert candidate is not None, cluster.state()
        command = cluster.switchover(old, candidate)
        new = cluster.wait_leader(other_than=old)
        output, _ = command.communicate(timeout=120)
        assert command.returncode == 0, output
        assert new == candidate, (new, candidate, output)
        at = cluster.logged_at(old, "received fast shutdown request", after=asked)
    else:
        cluster.kill_postmaster(old)
        at = asked
        new = cluster.wait_leader(other_than=old)
    stop.set()
    streamer.join(120)
    assert not streamer.is_alive(), "a start did not return"
    promoted = cluster.promoted_at(new, after=at)
    workload.signal_all()
    waiter.join(300)
    assert answers.get("result") == {"key": waited_key}, answers
    wait_until(
        lambda: not _count(url, f"SELECT count(*) FROM {SCHEMA}.runs WHERE status <> 'completed'"),
        240,
        interval=0.25,
        what=f"every run to complete after the {event}",
    )
    done = time.time()
    first_begun = _value(
        url,
        f"SELECT extract(epoch FROM min(started)) FROM {SCHEMA}.chaos_ledger"
        " WHERE started > to_timestamp(%s)",
        promoted,
    )
    first_completed = _value(
        url,
        f"SELECT extract(epoch FROM min(at)) FROM {SCHEMA}.history"
        " WHERE event = 'step_completed' AND at > to_timestamp(%s)",
        promoted,
    )
    assert first_begun is not None and first_completed is not None, "no step after the event"
    timings = {
        "asked": at - asked,
        "promoted": promoted - at,
        "first_step_begun": float(first_begun) - at,
        "first_step_completed": float(first_completed) - at,
        "all_done": done - at,
    }
    return timings, Fault(event, at, promoted, None, f"{old} -> {new}")


def _keyed(call: Callable[[], object], timeout: float = 90.0) -> None:
    """Make a keyed call, again while the database is unavailable (as the docs advise)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except perdure.DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _lapses(url: str) -> list[str]:
    """The history of every run that records a lapse (``lease_expired``), one line an event."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            f"SELECT h.run_id, r.workflow, h.at, h.event, h.step_position, h.attempt,"
            f" h.worker_id, h.detail FROM {SCHEMA}.history h JOIN {SCHEMA}.runs r"
            f" ON r.id = h.run_id WHERE h.run_id IN (SELECT run_id FROM {SCHEMA}.history"
            " WHERE event = 'lease_expired') ORDER BY h.run_id, h.id"
        ).fetchall()
    return [" ".join(str(v) for v in row) for row in rows]


def _value(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def _count(url: str, query: str, *params: Any) -> int:
    return int(_value(url, query, *params) or 0)
