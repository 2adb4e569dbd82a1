"""Graph runs: a fan-out of 100 (and of 1,000) parallel steps and their join, a 10-step chain.

Usage: python bench/fanout.py [--repeat R] [--concurrency C] [--database-url URL]

One `perdure worker` process (bench_app.py) serves. Each run's duration is
read from the database (created -> completed), so the client's polling does
not add to it. Prints each run's time and its steps per second.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench_app import CHAIN, FANOUT, WIDE
from harness import Probe, WorkerProcess, drop_schema, standalone

import perdure


def measure(url: str, probe: Probe, concurrency: int) -> dict[str, Any]:
    """One fan-out run and one chain run on a fresh schema; their durations."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        worker = WorkerProcess(url, schema, concurrency, Path(folder) / "worker.json")
        try:
            worker.wait_ready(probe)
            fan = _seconds(app, "bench_fanout", {"join": FANOUT})
            wide = _seconds(app, "bench_fanout1000", {"wide_join": WIDE})
            chain = _seconds(app, "bench_chain", {f"link{CHAIN - 1}": CHAIN})
        finally:
            worker.stop()
    app.close()
    drop_schema(probe, schema)
    return {
        "fanout_ms": fan * 1000,
        "fanout_steps_per_s": (FANOUT + 2) / fan,
        "fanout1000_ms": wide * 1000,
        "chain_ms": chain * 1000,
        "chain_steps_per_s": CHAIN / chain,
    }


def _seconds(app: perdure.App, workflow: str, expected: dict[str, int]) -> float:
    handle = app.start(workflow, 0)
    if handle.result(timeout=300) != expected:
        raise RuntimeError(f"{workflow} returned an unexpected result")
    run = handle.get()
    assert run.completed_at is not None
    return (run.completed_at - run.created_at).total_seconds()


def main() -> None:
    """Run both graphs and print their times."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    with standalone(parser) as (args, server, probe):
        for _ in range(args.repeat):
            f = measure(server.url, probe, args.concurrency)
            print(
                f"fan-out {FANOUT} + join: {f['fanout_ms']:.0f} ms "
                f"({f['fanout_steps_per_s']:.0f} steps/s); fan-out {WIDE} + join: "
                f"{f['fanout1000_ms']:.0f} ms; chain of {CHAIN}: "
                f"{f['chain_ms']:.0f} ms ({f['chain_steps_per_s']:.0f} steps/s)"
            )


if __name__ == "__main__":
    main()
