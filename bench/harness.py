"""What every part of `perdure bench` shares: the server, the counters, a worker process.

The counters are read from the server, so they count every client alike
(perdure's worker, a peer, pgbench):

- transactions: ``pg_stat_database.xact_commit`` (read-only ones included);
- statements: ``pg_stat_statements`` calls (``track_utility`` off, so BEGIN
  and COMMIT are not statements; they are round trips, which perdure's worker
  counts itself);
- WAL flushes: ``pg_stat_io`` (PostgreSQL 18) or ``pg_stat_wal.wal_sync``:
  how many times the server waited for the disk, which is what a durable
  commit costs.

The bench's own statements (these reads, its polls) run on one connection and
are counted, so that they can be taken out of every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

BENCH_DIR = Path(__file__).resolve().parent

#: Settings of the server the bench starts: statement counts, nothing else
#: changed (fsync and synchronous_commit stay on).
SERVER_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_utility": "off",
    "pg_stat_statements.max": "10000",
}


@dataclass
class Server:
    """The PostgreSQL server the whole bench runs on."""

    url: str
    bin_dir: Path | None
    base: Path | None = None

    def stop(self) -> None:
        """Stop the server if the bench started it, and remove its folder."""
        if self.base is None:
            return
        from perdure.store import embedded

        embedded.stop_server(self.base / "pg")
        shutil.rmtree(self.base, ignore_errors=True)


def start_server(url: str | None, max_connections: int = 200) -> Server:
    """Use the server at ``url``, or start a private embedded one in a temporary folder
    (allowing ``max_connections``)."""
    from perdure.store import embedded

    if url is not None:
        return Server(url, _pgbench_dir())
    base = Path(tempfile.mkdtemp(prefix="perdure-bench-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as another account when we are root
    server = embedded.ensure_server(
        base / "pg", max_connections=max_connections, settings=SERVER_SETTINGS
    )
    return Server(server.url, embedded.bin_dir(), base)


def _pgbench_dir() -> Path | None:
    with contextlib.suppress(Exception):
        from perdure.store import embedded

        return embedded.bin_dir()
    debian = Path("/usr/lib/postgresql/15/bin")
    return debian if (debian / "pgbench").exists() else None


@dataclass
class Counters:
    """Server-wide counters at one instant."""

    transactions: int
    statements: int | None
    wal_flushes: int | None
    at: float


class Probe:
    """The bench's own connection: reads counters and polls, and counts its statements."""

    def __init__(self, url: str) -> None:
        """Connect to ``url`` (autocommit) and make pg_stat_statements available if it can."""
        self.conn = psycopg.connect(url, autocommit=True, application_name="perdure-bench")
        self.own = 0
        self.statements_available = False
        preloaded = self.query_one("SELECT current_setting('shared_preload_libraries')")
        if "pg_stat_statements" in preloaded:
            with contextlib.suppress(psycopg.Error):
                self.run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                self.query_one("SELECT calls FROM pg_stat_statements LIMIT 1")
                self.statements_available = True
        self.wal_source = self._wal_source()

    def _wal_source(self) -> str | None:
        has_io_wal = self.query_one(
            "SELECT count(*) FROM pg_attribute"
            " WHERE attrelid = to_regclass('pg_catalog.pg_stat_io') AND attname = 'fsyncs'"
        )
        if has_io_wal:
            wal = self.query_one("SELECT count(*) FROM pg_stat_io WHERE object = 'wal'")
            if wal:
                return "io"
        with contextlib.suppress(psycopg.Error):
            self.query_one("SELECT wal_sync FROM pg_stat_wal")
            return "wal"
        return None

    def query_one(self, query: Any, params: Any = None) -> Any:
        """One value, counted as one of the bench's statements."""
        self.own += 1
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def run(self, query: Any, params: Any = None) -> None:
        """A statement without rows, counted as one of the bench's statements."""
        self.own += 1
        self.conn.execute(query, params)

    def query(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """All rows, counted as one of the bench's statements."""
        self.own += 1
        return self.conn.execute(query, params).fetchall()

    def counters(self) -> Counters:
        """Read the counters now (backends flush their counts when they go idle or exit)."""
        self.own += 1
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        transactions = self.query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        statements = None
        if self.statements_available:
            statements = self.query_one("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements")
        flushes = None
        if self.wal_source == "io":
            flushes = self.query_one("SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal'")
        elif self.wal_source == "wal":
            flushes = self.query_one("SELECT wal_sync FROM pg_stat_wal")
        return Counters(
            int(transactions),
            None if statements is None else int(statements),
            None if flushes is None else int(flushes),
            time.monotonic(),
        )

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


@dataclass
class Delta:
    """What happened on the server between two readings, less the bench's own work."""

    transactions: int
    statements: int | None
    wal_flushes: int | None
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def per(self, units: float) -> dict[str, float | None]:
        """Each count divided by ``units`` (steps, runs)."""

        def div(value: int | None) -> float | None:
            return None if value is None or units <= 0 else value / units

        return {
            "transactions": div(self.transactions),
            "statements": div(self.statements),
            "wal_flushes": div(self.wal_flushes),
        }


def delta(before: Counters, after: Counters, own_statements: int) -> Delta:
    """``after - before`` with the bench's own ``own_statements`` taken out.

    Every bench statement is one autocommit transaction; the readings
    themselves are part of ``own_statements``.
    """
    statements = None
    if before.statements is not None and after.statements is not None:
        statements = after.statements - before.statements - own_statements
    flushes = None
    if before.wal_flushes is not None and after.wal_flushes is not None:
        flushes = after.wal_flushes - before.wal_flushes
    return Delta(
        after.transactions - before.transactions - own_statements,
        statements,
        flushes,
        after.at - before.at,
    )


@contextlib.contextmanager
def counting(probe: Probe) -> Iterator[Delta]:
    """Measure the counters across a block; the yielded Delta is filled when it ends."""
    result = Delta(0, None, None, 0.0)
    before = probe.counters()
    own = probe.own
    try:
        yield result
    finally:
        # Backends report their counts when they go idle (at most once a
        # second) or exit; every client of the block has exited or idled by now.
        time.sleep(1.1)
        after = probe.counters()
        found = delta(before, after, probe.own - own)
        result.transactions = found.transactions
        result.statements = found.statements
        result.wal_flushes = found.wal_flushes
        result.seconds = found.seconds


class WorkerProcess:
    """One `perdure worker bench_app:app` subprocess on a schema of the server."""

    def __init__(self, url: str, schema: str, concurrency: int | None, stats_file: Path) -> None:
        """Start the worker; :meth:`wait_ready` waits until it listens."""
        env = dict(
            os.environ,
            PERDURE_DATABASE_URL=url,
            PERDURE_SCHEMA=schema,
            PYTHONPATH=os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]),
        )
        self.stats_file = stats_file
        #: Its id, so that its own listener is found (the last statement on a
        #: listener connection may be a heartbeat, or UNLISTEN).
        self.worker_id = f"bench-{uuid.uuid4().hex[:12]}"
        command = [sys.executable, "-m", "perdure", "worker", "bench_app:app"]
        command += ["--worker-id", self.worker_id]
        if concurrency is not None:  # None: the worker's default
            command += ["--concurrency", str(concurrency)]
        command += ["--log-level", "warning"]
        command += ["--stats-file", str(stats_file)]
        if os.environ.get("PERDURE_BENCH_PROFILE"):
            # py-spy samples the worker without slowing it much (bench --profile).
            profile = os.environ["PERDURE_BENCH_PROFILE"]
            spy = ["py-spy", "record", "--rate", "400", "--format", "raw", "-o", profile, "--"]
            command = [*spy, *command]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        self.schema = schema

    def wait_ready(self, probe: Probe, timeout: float = 60.0) -> None:
        """Wait until the worker is registered and its listener is connected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited with code {self.process.returncode}")
            listening = probe.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"perdure-worker-{self.worker_id}"[:50] + "-listen",),
            )
            if listening:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the worker did not start listening within {timeout:.0f} s")

    def connections(self, probe: Probe) -> int:
        """The worker's connections to the server now, its listener left out."""
        return int(
            probe.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
                " 'perdure-worker-%%' AND application_name NOT LIKE '%%-listen'"
            )
        )

    def cpu_seconds(self) -> float:
        """User + system CPU the worker process used so far."""
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> dict[str, Any]:
        """Stop the worker gracefully; its counters (statements, round trips, tasks)."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(self.stats_file.read_text()))
        return {}


def rss_peak_mib(pid: int) -> float | None:
    """The peak resident memory of process ``pid`` in MiB (its VmHWM), or None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its reaped children, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime, and cutime, cstime: the children it waited for (a server's
    # backends and autovacuum workers that exited between two readings).
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def server_cpu_seconds(probe: Probe) -> float | None:
    """CPU seconds used so far by the server's processes (its postmaster's children).

    Only for a server on this machine: None when its processes cannot be seen.
    """
    backend = int(probe.query_one("SELECT pg_backend_pid()"))
    try:
        postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    total = process_cpu_seconds(postmaster)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == postmaster:
                total += process_cpu_seconds(int(entry.name))
    return total


@contextlib.contextmanager
def standalone(
    parser: argparse.ArgumentParser,
    connections: Callable[[argparse.Namespace], int] | None = None,
) -> Iterator[tuple[argparse.Namespace, Server, Probe]]:
    """For a script run alone: its arguments (plus --database-url), the server and a probe
    (a server of its own allows ``connections(args)``, by default 200)."""
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    server = start_server(args.database_url, connections(args) if connections else 200)
    probe = Probe(server.url)
    try:
        yield args, server, probe
    finally:
        probe.close()
        server.stop()


def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drop_schema(probe: Probe, schema: str) -> None:
    """Remove a schema the bench created."""
    from psycopg import sql

    probe.run(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
