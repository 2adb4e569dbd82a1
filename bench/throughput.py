"""Throughput of a 3-step no-op function workflow through the queue, one worker process.

Usage: python bench/throughput.py [--runs N] [--concurrency C] [--database-url URL] [--metrics]

Starts N runs, then one worker (in this process), and reports runs/s and
steps/s from the first claim to the last completion. The full benchmark with
peers and pgbench is `perdure bench` (to come); this script is its seed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import psycopg

import perdure


def main() -> None:
    """Run the benchmark and print one line per repetition and the median."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--metrics", action="store_true", help="serve /metrics while measuring")
    args = parser.parse_args()
    rates = []
    for _ in range(args.repeat):
        rates.append(once(args.database_url, args.runs, args.concurrency, args.metrics))
    print(
        f"median: {statistics.median(rates):.0f} runs/s, {3 * statistics.median(rates):.0f} steps/s"
    )


def once(url: str | None, runs: int, concurrency: int, metrics: bool = False) -> float:
    """One repetition on a fresh schema; runs per second."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)

    @app.workflow("noop3")
    async def noop3(ctx: perdure.Context) -> int:
        a = await ctx.step("a", _noop)
        b = await ctx.step("b", _noop)
        c = await ctx.step("c", _noop)
        return a + b + c

    handles = [app.start("noop3") for _ in range(runs)]
    served = {"metrics_port": 0} if metrics else {}
    worker = app.worker(concurrency=concurrency, claim_batch=concurrency, **served)

    async def drive() -> tuple[float, float]:
        task = asyncio.create_task(worker.run())
        started, cpu = time.perf_counter(), time.process_time()
        for handle in handles:
            await handle.result_async(timeout=600)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        worker.request_stop()
        await task
        return elapsed, cpu

    elapsed, cpu = asyncio.run(drive())
    rate = runs / elapsed
    # CPU time of this process (worker and waiting client) per run: steadier
    # than the rate on a machine shared with other work.
    print(
        f"{runs} runs x 3 steps in {elapsed:.2f} s: {rate:.0f} runs/s, {3 * rate:.0f} steps/s, "
        f"{cpu / runs * 1e6:.0f} us CPU/run"
    )
    with psycopg.connect(app.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    app.close()
    return rate


async def _noop() -> int:
    return 1


if __name__ == "__main__":
    main()
