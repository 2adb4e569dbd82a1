"""The map-width curve: ``ctx.map`` over n items against the same n steps in sequence.

Usage: python bench/map_width.py [--items 1000,10000] [--repeat R] [--concurrency C]
       [--database-url URL]

One `perdure worker` process (bench_app.py) serves. Each run's duration is
read from the database (created -> completed). Prints, per width, the map's
steps per second, the sequence's, their ratio, the cost per item, and the
worker's peak resident memory.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

from harness import Probe, WorkerProcess, drop_schema, rss_peak_mib, standalone

import perdure


def measure(
    url: str, probe: Probe, concurrency: int | None, items: int, sequence: bool = True
) -> dict[str, Any]:
    """One map run (and one sequence run) of ``items`` steps on a fresh schema."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        worker = WorkerProcess(url, schema, concurrency, Path(folder) / "worker.json")
        try:
            worker.wait_ready(probe)
            mapped = _seconds(app, "bench_map", items)
            rss = rss_peak_mib(worker.process.pid)
            chained = _seconds(app, "bench_sequence", items) if sequence else None
        finally:
            worker.stop()
    app.close()
    drop_schema(probe, schema)
    return {
        "items": items,
        "map_s": mapped,
        "map_steps_per_s": items / mapped,
        "map_us_per_item": mapped / items * 1e6,
        "sequence_steps_per_s": None if chained is None else items / chained,
        "ratio": None if chained is None else chained / mapped,
        "worker_rss_peak_mib": rss,
    }


def gather_sleep_ms(url: str, probe: Probe, concurrency: int | None, repeat: int) -> float:
    """The median duration of a gather of 10 steps that each sleep 50 ms."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        worker = WorkerProcess(url, schema, concurrency, Path(folder) / "worker.json")
        try:
            worker.wait_ready(probe)
            times = [_seconds(app, "bench_gather_sleep", 10) for _ in range(repeat)]
        finally:
            worker.stop()
    app.close()
    drop_schema(probe, schema)
    return statistics.median(times) * 1000


def _seconds(app: perdure.App, workflow: str, n: int) -> float:
    handle = app.start(workflow, n)
    result = handle.result(timeout=3600)
    if result not in (n, 10):
        raise RuntimeError(f"{workflow} returned {result!r}")
    run = handle.get()
    assert run.completed_at is not None
    return (run.completed_at - run.created_at).total_seconds()


def main() -> None:
    """Print the curve."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--no-sequence", action="store_true")
    parser.add_argument("--gather", action="store_true", help="also time a gather of 10 naps")
    with standalone(parser) as (args, server, probe):
        for _ in range(args.repeat):
            for n in (int(x) for x in args.items.split(",")):
                m = measure(server.url, probe, args.concurrency, n, not args.no_sequence)
                seq, ratio = m["sequence_steps_per_s"], m["ratio"]
                print(
                    f"map {n}: {m['map_s']:.2f} s, {m['map_steps_per_s']:.0f} steps/s, "
                    f"{m['map_us_per_item']:.0f} us/item; sequence "
                    f"{'-' if seq is None else f'{seq:.0f}'} steps/s; ratio "
                    f"{'-' if ratio is None else f'{ratio:.2f}'}; worker peak RSS "
                    f"{m['worker_rss_peak_mib']:.0f} MiB",
                    flush=True,
                )
            if args.gather:
                ms = gather_sleep_ms(server.url, probe, args.concurrency, 5)
                print(f"gather of 10 x 50 ms sleeps: {ms:.0f} ms (median of 5)", flush=True)


if __name__ == "__main__":
    main()
