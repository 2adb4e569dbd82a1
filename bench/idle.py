"""What idle workers cost the server: connections held and transactions per second.

Usage: python bench/idle.py [--workers 10] [--seconds 30] [--settle 30] [--database-url URL]

Starts N `perdure worker` processes (bench_app.py) on a fresh schema with no
work at all, waits until each listens, lets them settle (``--settle``: their
pools shrink back after 10 s idle), then counts over
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
            for worker in fleet:
                worker.wait_ready(probe)
            # First heartbeats, the maintenance pass, the claim loops; the
            # pools shrink back to one connection after their idle time.
            time.sleep(settle)
            if probe.statements_available:
                probe.run("SELECT pg_stat_statements_reset()")
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
            for worker in fleet:
                worker.stop()
    drop_schema(probe, schema)
    return {
        "workers": workers,
        "seconds": round(elapsed, 1),
        "connections": connections,
        "listeners": listeners,
        "by_name": {str(kind): int(n) for kind, n in kinds},
        "top_statements": [(int(calls), str(text)) for calls, text in top],
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
    parser.add_argument("--settle", type=float, default=30.0)
    with standalone(parser) as (args, server, probe):
        found = measure(server.url, probe, args.workers, args.seconds, args.settle)
        print(
            f"{found['workers']} idle workers over {found['seconds']} s: "
            f"{found['connections']} server connections "
            f"({found['connections_per_worker']:.1f} per worker, "
            f"{found['listeners']} of them listeners), "
            f"{found['transactions_per_second']:.1f} transactions/s "
            f"({found['transactions_per_second_per_worker']:.2f} per worker)"
        )
        print("connections by name:", found["by_name"])
        for calls, text in found["top_statements"]:
            print(f"  {calls:6d}  {text}")


if __name__ == "__main__":
    main()
