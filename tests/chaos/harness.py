"""Run a chaos workload: workers, a steady stream of runs, faults, then the checker.

:func:`run_chaos` owns everything it starts: a PostgreSQL server of its own
(it restarts it), the worker processes, the fault injector and a sampler that
watches for two live claims of one task. Randomness comes from one seed,
printed first: the runs' shapes and timings and the faults' order and moments
follow from it (the processes' timing does not, so a replay is close, not
exact).
"""

from __future__ import annotations

import functools
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

import perdure
from apps import chaos_app
from chaos import checker
from chaos.faults import Fleet, Injector
from chaos.server import OwnServer

T = TypeVar("T")
SCHEMA = "chaos"
#: How often each workflow is started; a parent also starts a child.
MIX = {
    "chaos_linear": 3,
    "chaos_signal": 2,
    "chaos_fanout": 2,
    "chaos_parent": 2,
    "chaos_graph": 2,
}


@dataclass(frozen=True)
class ChaosConfig:
    """The shape of one chaos run. Every duration is in seconds."""

    seed: int
    #: How long runs keep being started (at least until every fault kind was injected).
    duration: float = 30.0
    starts_per_second: float = 1.5
    workers: int = 3
    concurrency: int = 6
    lease_seconds: float = 3.0
    #: Pause between two faults, drawn uniformly from this range.
    fault_gap: tuple[float, float] = (1.5, 3.5)
    #: How long the runs may take to finish once the faults stopped.
    drain_seconds: float = 120.0

    @property
    def reap_seconds(self) -> float:
        """The workers' reaper interval (WorkerOptions.reap_interval)."""
        return min(self.lease_seconds / 2, 10.0)


def run_chaos(config: ChaosConfig, out: TextIO | None = None) -> checker.Report:
    """Run the workload under faults, check every invariant, print the summary (to stdout)."""
    say = _printer(out or sys.stdout)
    say(f"chaos seed {config.seed} (replay: --seed {config.seed})")
    server = OwnServer.create(max_connections=150)
    fleet = Fleet(
        server,
        SCHEMA,
        config.workers,
        [
            "--concurrency",
            str(config.concurrency),
            "--lease-seconds",
            str(config.lease_seconds),
            "--poll-seconds",
            "0.5",
            "--shutdown-seconds",
            "1",
        ],
    )
    app = perdure.App(server.url, schema=SCHEMA, pool_size=4)
    sampler = Sampler(server, SCHEMA)
    injector = Injector(
        random.Random(config.seed + 1),
        server,
        fleet,
        lease_seconds=config.lease_seconds,
        gap=config.fault_gap,
    )
    began = time.monotonic()
    try:
        app.ensure_schema()
        with server.connect() as conn:
            for ddl in chaos_app.LEDGER_DDL:
                conn.execute(ddl.replace("{s}", SCHEMA))
        fleet.start()
        _wait_for_registration(app, 60)
        sampler.start()
        injector.start()
        driver = Driver(app, random.Random(config.seed), config)
        driver.run(until=lambda: injector.every_kind.is_set(), say=say)
        injector.finish()
        say(f"workload started {len(driver.keys)} runs; faults stopped, draining")
        left = _wait_for_final(server, SCHEMA, config.drain_seconds)
        if left:
            say(f"runs still unfinished after {config.drain_seconds:.0f} s: {left}")
        sampler.finish()
        with server.connect() as conn:
            report = checker.check(
                conn,
                SCHEMA,
                keys=driver.keys,
                expected_steps=chaos_app.STEPS,
                faults=injector.faults,
                # A lease that lapsed during a fault is rescued up to a lease
                # and a reaper round after it ended.
                aftershock=config.lease_seconds + config.reap_seconds + 1.0,
                live_double_claims=sampler.violations,
            )
        for error in injector.errors:
            report.invariants.append(checker.Invariant("fault injection", [error]))
    finally:
        sampler.finish()
        app.close()
        fleet.close()
        server.close()
    for line in report.lines():
        say(line)
    say(
        f"workers started {len(fleet.everyone)}, peak worker connections "
        f"{sampler.peak_connections}, took {time.monotonic() - began:.0f} s, "
        f"seed {config.seed}: {'OK' if report.ok else 'INVARIANTS BROKEN'}"
    )
    return report


def _printer(out: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"[chaos] {line}", file=out, flush=True)

    return say


def retry(call: Callable[[], T], what: str, deadline: float = 120.0) -> T:
    """``call()`` until the database lets it succeed (for calls that are idempotent)."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            return call()
        except (perdure.DatabaseUnavailable, psycopg.Error, PoolTimeout) as exc:
            if time.monotonic() > give_up:
                raise AssertionError(f"{what} kept failing for {deadline} s: {exc}") from exc
            time.sleep(0.3)


class Driver:
    """Starts runs at a steady rate (each with a key, so a retried start is one run)."""

    def __init__(self, app: perdure.App, rng: random.Random, config: ChaosConfig) -> None:
        """Draw every run's shape from ``rng``."""
        self.app = app
        self.rng = rng
        self.config = config
        self.keys: list[str] = []
        #: (when, run key) of the signals still to send, in order.
        self.signals: list[tuple[float, str]] = []

    def run(self, until: Callable[[], bool], say: Callable[[str], None]) -> None:
        """Start runs for the configured duration, and on until ``until()``; send the signals."""
        began = time.monotonic()
        workflows = [w for w, weight in MIX.items() for _ in range(weight)]
        n = 0
        reported = began
        while time.monotonic() - began < self.config.duration or not until():
            due = began + n / self.config.starts_per_second
            self._send_signals(before=due)
            time.sleep(max(0.0, due - time.monotonic()))
            self._start(self.rng.choice(workflows), n)
            n += 1
            if time.monotonic() - reported >= 15:
                reported = time.monotonic()
                say(f"{n} runs started in {reported - began:.0f} s")
        self._send_signals(before=float("inf"))

    def _start(self, workflow: str, n: int) -> None:
        params = {"work": round(self.rng.uniform(0.05, 1.2), 2), "sleep": self.rng.uniform(0.2, 2)}
        key = f"chaos-{self.config.seed}-{n}"
        retry(lambda: self.app.start(workflow, params, key=key), f"starting {key}")
        self.keys.append(key)
        if workflow == "chaos_signal":
            self.signals.append((time.monotonic() + self.rng.uniform(0, 3), key))

    def _send_signals(self, before: float) -> None:
        while self.signals and self.signals[0][0] <= before:
            when, key = self.signals.pop(0)
            time.sleep(max(0.0, when - time.monotonic()))
            # The signal's own key makes a retried send one signal.
            send = functools.partial(self.app.signal, key, "go", {"key": key}, key="go")
            retry(send, f"signalling {key}")


class Sampler(threading.Thread):
    """Every half second: two live claims of one task? How many worker connections?"""

    def __init__(self, server: OwnServer, schema: str) -> None:
        """Watch ``schema`` on ``server`` once started."""
        super().__init__(name="chaos-sampler", daemon=True)
        self.server = server
        self.schema = schema
        self.violations: list[str] = []
        self.peak_connections = 0
        self._finish = threading.Event()

    def finish(self) -> None:
        """Stop sampling."""
        self._finish.set()
        if self.is_alive():
            self.join(10)

    def run(self) -> None:
        while not self._finish.wait(0.5):
            try:
                self._sample()
            except psycopg.Error:
                continue  # the server is away or full: that is the point

    def _sample(self) -> None:
        with psycopg.connect(self.server.url, autocommit=True, connect_timeout=2) as conn:
            doubles = conn.execute(
                f"SELECT run_id, kind, step_position, array_agg(worker_id) FROM {self.schema}.tasks"
                " WHERE status = 'claimed' AND lease_expires_at > now()"
                " GROUP BY 1, 2, 3 HAVING count(*) > 1"
            ).fetchall()
            for run_id, kind, position, workers in doubles:
                self.violations.append(
                    f"run {run_id} {kind} task {position}: live claims by {workers}"
                )
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name LIKE 'perdure-worker%'"
            ).fetchone()
            self.peak_connections = max(self.peak_connections, int(row[0]) if row else 0)


def _wait_for_registration(app: perdure.App, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not {w.name for w in app.workflows()} >= set(chaos_app.STEPS):
        if time.monotonic() > deadline:
            raise AssertionError("the chaos workers did not register their workflows")
        time.sleep(0.1)


def _wait_for_final(server: OwnServer, schema: str, timeout: float) -> dict[str, int]:
    """Poll until no run is unfinished, for up to ``timeout`` s; what is left by status."""
    deadline = time.monotonic() + timeout
    query = (
        f"SELECT status, count(*) FROM {schema}.runs"
        f" WHERE status NOT IN {checker.FINAL!r} GROUP BY 1"
    )
    while True:
        left = dict(retry(lambda: _rows(server, query), "reading the runs"))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _rows(server: OwnServer, query: str) -> list[Any]:
    with server.connect() as conn:
        return conn.execute(query).fetchall()
