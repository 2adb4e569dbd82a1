"""Wake-up latency with an idle worker: start -> first step, signal -> continue.

Usage: python bench/latency.py [--samples N] [--database-url URL]

Runs one `perdure worker` process (this file, with --worker) and, one run at a
time so the worker is idle each time, measures:
  - start -> first step: from just before app.start() to the moment the first
    step function begins (it returns time.time());
  - signal -> continue: from just before app.signal() to the moment the step
    after ctx.wait_for_signal() begins.
Both clocks are this machine's. Prints p50/p90/p99 and the number of samples.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

import psycopg

import perdure

app = perdure.App()


@app.workflow("latency_start")
async def latency_start(ctx: perdure.Context) -> float:
    """Its first step reports when it began."""
    return await ctx.step("first", time.time)


@app.workflow("latency_signal")
async def latency_signal(ctx: perdure.Context) -> float:
    """The step after the signal reports when it began."""
    await ctx.wait_for_signal("go")
    return await ctx.step("after", time.time)


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return (
        f"p50 {statistics.median(ordered) * 1000:6.2f} ms  p90 {pick(0.9):6.2f} ms  "
        f"p99 {pick(0.99):6.2f} ms  (n={len(ordered)})"
    )


def main() -> None:
    """Measure and print both latencies."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--database-url", default=os.environ.get("PERDURE_DATABASE_URL"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        app.run_worker(concurrency=4, poll_seconds=5)
        return
    schema = f"latency_{uuid.uuid4().hex[:8]}"
    url = args.database_url or app.url
    app.configure(url=url, schema=schema)
    app.register()
    env = dict(os.environ, PERDURE_DATABASE_URL=url, PERDURE_SCHEMA=schema)
    worker = subprocess.Popen([sys.executable, __file__, "--worker"], env=env)
    try:
        # Warm up: the worker is registered, connected and listening.
        app.start("latency_start").result(timeout=60)
        starts, signals = [], []
        for _ in range(args.samples):
            before = time.time()
            began = app.start("latency_start").result(timeout=30)
            starts.append(began - before)
        for _ in range(args.samples):
            handle = app.start("latency_signal")
            while handle.status() != perdure.RunStatus.WAITING:
                time.sleep(0.001)
            before = time.time()
            app.signal(handle.id, "go")
            signals.append(handle.result(timeout=30) - before)
        print(f"start  -> first step : {_quantiles(starts)}")
        print(f"signal -> continue   : {_quantiles(signals)}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        app.close()


if __name__ == "__main__":
    main()
