"""The fault injector: kills, stalls and disconnects workers, restarts and fills the server.

It runs on a thread of its own next to the workload. At random moments drawn
from its seeded generator it injects one fault at a time, and records when it
began, when it ended and which worker process it hit (``pid`` None: all of
them), so that the checker can tell a step that ran twice because of a fault
from one that ran twice for no reason.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from chaos.server import OwnServer
from helpers import WorkerProcess

TARGET = "apps.chaos_app:app"

#: Every kind of fault, in the order of the summary.
KINDS = ("kill", "stop", "terminate", "restart", "fill")


@dataclass(frozen=True)
class Fault:
    """One injected fault: what, when (wall-clock seconds), and whom."""

    kind: str
    started: float
    ended: float
    #: The worker process hit; None for a fault that hits every worker.
    pid: int | None
    detail: str = ""


class Fleet:
    """The worker processes of the workload; a killed worker is replaced at once."""

    def __init__(self, server: OwnServer, schema: str, size: int, args: list[str]) -> None:
        """Describe ``size`` workers of the chaos app started with ``args``."""
        self.server = server
        self.schema = schema
        self.size = size
        self.args = args
        self.live: list[WorkerProcess] = []
        #: Every worker ever started, in order: the summary reads their logs.
        self.everyone: list[WorkerProcess] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the fleet's workers."""
        for _ in range(self.size):
            self.spawn()

    def spawn(self) -> WorkerProcess:
        """Start one more worker."""
        worker = WorkerProcess.start(TARGET, self.server.url, self.schema, self.args, {})
        with self._lock:
            self.live.append(worker)
            self.everyone.append(worker)
        return worker

    def pick(self, rng: random.Random) -> WorkerProcess:
        """A live worker, chosen by ``rng``."""
        with self._lock:
            return rng.choice(self.live)

    def replace(self, worker: WorkerProcess) -> WorkerProcess:
        """SIGKILL ``worker`` and start another in its place."""
        worker.kill()
        with self._lock:
            self.live.remove(worker)
        return self.spawn()

    def close(self) -> None:
        """Kill every worker still running."""
        for worker in self.everyone:
            if worker.proc.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()


class Injector(threading.Thread):
    """Inject faults at random moments until :meth:`finish`; every kind at least once.

    The first faults are one of each kind, in an order drawn from the seed;
    after that each kind is drawn at random.
    """

    def __init__(
        self,
        rng: random.Random,
        server: OwnServer,
        fleet: Fleet,
        *,
        lease_seconds: float,
        gap: tuple[float, float],
    ) -> None:
        """Prepare an injector on ``server`` and ``fleet``; :meth:`start` starts it."""
        super().__init__(name="chaos-injector", daemon=True)
        self.rng = rng
        self.server = server
        self.fleet = fleet
        self.lease_seconds = lease_seconds
        self.gap = gap
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        #: Set once every kind of fault was injected at least once.
        self.every_kind = threading.Event()
        self._finish = threading.Event()

    def finish(self, timeout: float = 60.0) -> None:
        """Stop after the fault in progress, and wait for that."""
        self._finish.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"the fault injector did not stop within {timeout} s")

    def run(self) -> None:
        first_round = list(KINDS)
        self.rng.shuffle(first_round)
        while not self._finish.wait(self.rng.uniform(*self.gap)):
            kind = first_round.pop(0) if first_round else self.rng.choice(KINDS)
            try:
                self.faults.append(getattr(self, f"_inject_{kind}")())
            except Exception as exc:  # reported by the summary, and fails the check
                self.errors.append(f"{kind}: {exc!r}")
            if not first_round:
                self.every_kind.set()

    # One method per kind --------------------------------------------------------------

    def _inject_kill(self) -> Fault:
        """SIGKILL a worker (a crash) and start a replacement."""
        victim = self.fleet.pick(self.rng)
        at = time.time()
        self.fleet.replace(victim)
        return Fault("kill", at, at, victim.pid)

    def _inject_stop(self) -> Fault:
        """SIGSTOP a worker past its lease, then SIGCONT it: a zombie the fence must stop."""
        victim = self.fleet.pick(self.rng)
        started = time.time()
        victim.signal(signal.SIGSTOP)
        try:
            time.sleep(self.lease_seconds + self.rng.uniform(1.5, 3.0))
        finally:
            victim.signal(signal.SIGCONT)
        return Fault("stop", started, time.time(), victim.pid)

    def _inject_terminate(self) -> Fault:
        """Terminate every connection of every worker (pg_terminate_backend)."""
        at = time.time()
        with self.server.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name LIKE 'perdure-worker%'"
            ).fetchone()
        return Fault("terminate", at, time.time(), None, f"{row[0] if row else 0} connections")

    def _inject_restart(self) -> Fault:
        """Restart the server: fast shutdown, a few seconds down, start."""
        went_down, came_back = self.server.restart(self.rng.uniform(1.0, 3.0))
        return Fault("restart", went_down, came_back, None, f"down {came_back - went_down:.1f} s")

    def _inject_fill(self) -> Fault:
        """Take every free connection slot but a reserve, hold them a few seconds, release."""
        reserve = 2
        held: list[psycopg.Connection[Any]] = []
        started = time.time()
        try:
            with self.server.connect() as conn:
                row = conn.execute(
                    "SELECT current_setting('max_connections')::int - count(*)"
                    " FROM pg_stat_activity WHERE backend_type = 'client backend'"
                ).fetchone()
            # Our own connection closed since, so one more slot than counted is free.
            free = (row[0] if row else 0) + 1
            while len(held) < free - reserve:
                try:
                    held.append(self.server.connect())
                except psycopg.OperationalError:
                    break  # full: the workers' connections took the rest
            time.sleep(self.rng.uniform(2.0, 4.0))
        finally:
            for conn in held:
                conn.close()
        return Fault("fill", started, time.time(), None, f"{len(held)} connections held")
