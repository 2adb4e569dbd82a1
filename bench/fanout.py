"""Fan-out cost: one run whose ctx.map spreads N no-op steps over parallel tasks.

Usage: python bench/fanout.py [--items N] [--concurrency C] [--repeat R] [--database-url URL]

Reports, per repetition, the time from the run's start to its result and the
parallel steps per second, then the median. Each step is a task of its own
(claimed, replayed up to the gather, checkpointed, its task deleted, the run
woken after the last), so this measures the per-step overhead of ctx.map
against the sequential steps of bench/throughput.py. With --sequential the
same N steps run one after another in one run, for comparison.
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
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sequential", action="store_true")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    rates = [
        once(args.database_url, args.items, args.concurrency, args.sequential)
        for _ in range(args.repeat)
    ]
    print(f"median: {statistics.median(rates):.0f} steps/s")


def once(url: str | None, items: int, concurrency: int, sequential: bool) -> float:
    """One repetition on a fresh schema; steps per second."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)

    @app.workflow("fan")
    async def fan(ctx: perdure.Context, n: int) -> int:
        if sequential:
            return sum([await ctx.step(f"one[{i}]", _one, i) for i in range(n)])
        return sum(await ctx.map("one", _one, range(n)))

    worker = app.worker(concurrency=concurrency, claim_batch=concurrency)

    async def drive() -> float:
        task = asyncio.create_task(worker.run())
        started = time.perf_counter()
        handle = await app.start_async("fan", items)
        assert await handle.result_async(timeout=600) == sum(range(items))
        elapsed = time.perf_counter() - started
        worker.request_stop()
        await task
        return elapsed

    elapsed = asyncio.run(drive())
    rate = items / elapsed
    shape = "sequential steps" if sequential else "parallel steps (ctx.map)"
    print(f"{items} {shape} in {elapsed:.2f} s: {rate:.0f} steps/s")
    with psycopg.connect(app.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    app.close()
    return rate


async def _one(i: int) -> int:
    return i


if __name__ == "__main__":
    main()
