"""Parallel steps on busy single-slot workers: how far apart do they start?

Usage: python bench/parallel_start.py [--runs 10] [--workers 3] [--database-url URL]

Starts ``--workers`` `perdure worker --concurrency 1` processes (bench_app.py),
then, one run at a time, ``bench_pair`` (a ``ctx.gather`` of two 0.8 s steps)
and ``bench_diamond`` (a graph: a root, two 0.8 s steps, a join). The worker
that reaches the parallel steps holds the run in its one slot, so the second
step must go to another worker. Each step reports when it began
(time.time() of this machine); the skew is the difference. Prints the median
and the largest skew of each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from harness import Probe, WorkerProcess, drop_schema, standalone

import perdure


def measure(url: str, probe: Probe, runs: int, workers: int) -> dict[str, list[float]]:
    """The start skews, in ms, of ``runs`` runs of each workflow."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    skews: dict[str, list[float]] = {"bench_pair": [], "bench_diamond": []}
    with tempfile.TemporaryDirectory(prefix="perdure-bench-skew-") as folder:
        fleet = [
            WorkerProcess(url, schema, 1, Path(folder) / f"worker{i}.json") for i in range(workers)
        ]
        try:
            for worker in fleet:
                worker.wait_ready(probe)
            time.sleep(3)  # the first heartbeats: each worker's place in the fleet
            for _ in range(runs):
                for workflow, found in skews.items():
                    result = app.start(workflow).result(timeout=60)
                    # A graph's result: its sinks' outputs by name.
                    left, right = result["bottom"] if isinstance(result, dict) else result
                    found.append(abs(left - right) * 1000)
        finally:
            for worker in fleet:
                worker.stop()
    app.close()
    drop_schema(probe, schema)
    return skews


def main() -> None:
    """Measure and print the skews."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=3)
    with standalone(parser) as (args, server, probe):
        for workflow, found in measure(server.url, probe, args.runs, args.workers).items():
            print(
                f"{workflow}: start skew p50 {statistics.median(found):.1f} ms, "
                f"max {max(found):.1f} ms (n={len(found)}, {args.workers} single-slot workers)"
            )


if __name__ == "__main__":
    main()
