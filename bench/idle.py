"""What idle workers cost the server: connections held and transactions per second.

Usage: python bench/idle.py [--workers 10] [--seconds 30] [--database-url URL]

Starts N `perdure worker` processes (bench_app.py) on a fresh schema with no
work at all, waits until each listens, lets them settle, then counts over
``--seconds``:
  - server connections: backends of the workers (application_name
    perdure-worker-*), listener included, at the end of the window;
  - transactions/s: pg_stat_database.xact_commit + xact_rollback, less the
    bench's own readings, divided by the window.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import Probe, WorkerProcess, drop_schema, standalone

import perdure


def measure(url: str, probe: Probe, workers: int, seconds: float) -> dict[str, Any]:
    """Idle cost of ``workers`` processes over ``seconds``, on a fresh schema."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    perdure.App(url, schema=schema).ensure_schema()
    with tempfile.TemporaryDirectory(prefix="perdure-bench-idle-") as folder:
        fleet = [
            WorkerProcess(url, schema, 4, Path(folder) / f"worker{i}.json") for i in range(workers)
        ]
        try:
            for worker in fleet:
                worker.wait_ready(probe)
            time.sleep(3.0)  # first heartbeats, maintenance pass, claim loops settle
            before, own = _transactions(probe), probe.own
            began = time.monotonic()
            time.sleep(seconds)
            probe.run("SELECT pg_stat_clear_snapshot()")
            after = _transactions(probe)
            elapsed = time.monotonic() - began
            connections = int(
                probe.query_one(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'perdure-worker-%%'"
                )
            )
            listeners = int(
                probe.query_one(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'perdure-worker-%%-listen'"
                )
            )
            transactions = after - before - (probe.own - own)
        finally:
            for worker in fleet:
                worker.stop()
    drop_schema(probe, schema)
    return {
        "workers": workers,
        "seconds": round(elapsed, 1),
        "connections": connections,
        "listeners": listeners,
        "connections_per_worker": connections / workers,
        "transactions_per_second": transactions / elapsed,
        "transactions_per_second_per_worker": transactions / elapsed / workers,
    }


def _transactions(probe: Probe) -> int:
    probe.run("SELECT pg_stat_clear_snapshot()")
    return int(
        probe.query_one(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
    )


def main() -> None:
    """Measure and print the idle cost."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    with standalone(parser) as (args, server, probe):
        found = measure(server.url, probe, args.workers, args.seconds)
        print(
            f"{found['workers']} idle workers over {found['seconds']} s: "
            f"{found['connections']} server connections "
            f"({found['connections_per_worker']:.1f} per worker, "
            f"{found['listeners']} of them listeners), "
            f"{found['transactions_per_second']:.1f} transactions/s "
            f"({found['transactions_per_second_per_worker']:.2f} per worker)"
        )


if __name__ == "__main__":
    main()
