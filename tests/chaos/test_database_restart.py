"""Workers ride out a restart of the PostgreSQL server without being restarted.

One ``perdure worker`` process keeps running while its server goes away for
longer than a lease and comes back: in-flight runs finish, the LISTEN
connection, the heartbeat and the reaper work again, new work is done, and the
worker's log shows it retried at a bounded rate rather than in a busy loop.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import perdure
from chaos.server import OwnServer
from helpers import WorkerProcess, wait_until

pytestmark = pytest.mark.chaos

TARGET = "apps.crash_app:app"
SCHEMA = "restart"
LEASE = 3.0
DOWN_SECONDS = 8.0
#: What a worker logs each time it tries to reach the server and fails.
RECONNECT_LINE = re.compile(
    r"error connecting in|listener lost its connection|claim failed|still cannot reach"
)


@pytest.fixture
def app(own_server: OwnServer) -> Iterator[perdure.App]:
    with own_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.ledger (run_id uuid, step text, pid int)")
        conn.execute(f"CREATE TABLE {SCHEMA}.tx_ledger (run_id uuid, pid int)")
    app = perdure.App(own_server.url, schema=SCHEMA)
    app.ensure_schema()  # its reads never create it
    yield app
    app.close()


def _worker(server: OwnServer, *args: str) -> WorkerProcess:
    # A long poll interval: a prompt claim after the restart proves the
    # listener is back, since polling would take 30 s.
    options = ["--lease-seconds", str(LEASE), "--poll-seconds", "30", *args]
    return WorkerProcess.start(TARGET, server.url, SCHEMA, options, {})


def _start(app: perdure.App, workflow: str, value: Any) -> perdure.RunHandle:
    def attempt() -> perdure.RunHandle | None:
        try:
            return app.start(workflow, value)
        except perdure.UnknownWorkflow:
            return None  # the worker has not registered its workflows yet

    return wait_until(attempt, 30, what=f"a run of {workflow} to start")


def _listening(server: OwnServer) -> bool:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name LIKE 'perdure-worker-%-listen'"
        ).fetchone()
    return bool(row and row[0])


def _open_transactions(server: OwnServer) -> int:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'"
        ).fetchone()
    return int(row[0]) if row else 0


def _ledger(server: OwnServer) -> Counter[tuple[str, str]]:
    with server.connect() as conn:
        rows = conn.execute(f"SELECT run_id::text, step FROM {SCHEMA}.ledger").fetchall()
    return Counter((r[0], r[1]) for r in rows)


def test_a_worker_survives_a_server_restart(own_server: OwnServer, app: perdure.App) -> None:
    # A worker that dies holding a run with a long lease, before the restart:
    # only the reaper of the survivor, after the restart, can give it back.
    victim = _worker(own_server, "--concurrency", "1", "--lease-seconds", "20")
    survivor: WorkerProcess | None = None
    try:
        orphan = _start(app, "crashy", {"slow": 1})
        wait_until(lambda: _ledger(own_server)[(orphan.id, "slow")] == 1, 30, what="slow step")
        victim.kill()

        survivor = _worker(own_server, "--concurrency", "4")
        app.start("three", 0).result(timeout=30)
        # Runs in flight across the restart: each is inside its transaction
        # step, whose connection the shutdown closes.
        in_flight = [app.start("crashy", {"tx_sleep": 3}) for _ in range(3)]
        wait_until(lambda: _open_transactions(own_server) == 3, 30, what="open transactions")
        went_down, came_back = own_server.restart(DOWN_SECONDS)

        # In-flight runs finish; their committed steps did not run again, and
        # the lost connection did not count as a failed attempt of the step.
        for handle in in_flight:
            handle.result(timeout=60)
            steps = {s.name: s for s in app.steps(handle.id)}
            assert steps["record"].attempts == 1
            events = {e.event for e in app.history(handle.id)}
            assert not events & {"step_retry_scheduled", "run_retry_scheduled"}
        ledger = _ledger(own_server)
        assert all(ledger[(h.id, "first")] == 1 for h in in_flight)
        with own_server.connect() as conn:
            tx = conn.execute(f"SELECT run_id::text, count(*) FROM {SCHEMA}.tx_ledger GROUP BY 1")
            assert {run: n for run, n in tx.fetchall() if n != 1} == {}

        # The listener is back, and wakes the worker: a new run is claimed in
        # well under the 30 s poll interval.
        wait_until(lambda: _listening(own_server), 30, what="the LISTEN connection")
        started = time.monotonic()
        app.start("three", 1).result(timeout=20)
        assert time.monotonic() - started < 10

        # The reaper works again: the dead worker's run is finished by the survivor.
        assert orphan.result(timeout=60)["slow"] == survivor.pid
        log = survivor.output()
        assert "reaper reaped" in log

        assert survivor.proc.poll() is None, "the worker process exited"
        attempts = len(RECONNECT_LINE.findall(log))
        down = came_back - went_down
        # A busy loop would log thousands; the backoff allows a few a second
        # for each of the worker's loops (claims, heartbeats, listener, schedules).
        assert 0 < attempts <= 10 * down + 20, f"{attempts} reconnect attempts in {down:.1f} s"
    finally:
        victim.kill()
        if survivor is not None:
            survivor.signal(signal.SIGTERM)
            assert survivor.wait(30) == 0, "the worker did not stop gracefully"
