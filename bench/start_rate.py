"""How fast one process starts runs: ``app.start`` from threads, ``start_async`` with
many in flight, and ``start_many`` in batches; runs per second and client CPU per start.

No worker runs: the runs stay queued. Each figure is the median of ``--repeat``
rounds on a fresh schema.

    .venv/bin/python bench/start_rate.py --starts 3000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness import Probe, drop_schema, standalone

import perdure


def _define(app: perdure.App) -> None:
    @app.workflow("bench_started")
    async def bench_started(ctx: perdure.Context, value: Any = None) -> Any:
        return value


def _timed(body: Callable[[], None], starts: int) -> tuple[float, float]:
    """(runs per second, client CPU ms per start) of ``body``."""
    wall, cpu = time.perf_counter(), time.process_time()
    body()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return starts / wall, cpu / starts * 1000


def measure(url: str, probe: Probe, shape: str, starts: int, batch: int) -> tuple[float, float]:
    """One round of ``shape`` on a fresh schema."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema, auto_migrate=True)
    _define(app)
    app.start("bench_started", 0)  # migrate, register and warm the pool first
    try:
        if shape.startswith("threads"):
            threads = int(shape.split(":")[1])

            def body() -> None:
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(lambda i: app.start("bench_started", i), range(starts)))

            return _timed(body, starts)
        if shape == "async64":

            async def many() -> None:
                gate = asyncio.Semaphore(64)

                async def one(i: int) -> None:
                    async with gate:
                        await app.start_async("bench_started", i)

                await asyncio.gather(*(one(i) for i in range(starts)))

            return _timed(lambda: asyncio.run(many()), starts)
        assert shape == "many"

        def batches() -> None:
            for first in range(0, starts, batch):
                app.start_many("bench_started", list(range(first, min(first + batch, starts))))

        return _timed(batches, starts)
    finally:
        app.close()
        drop_schema(probe, schema)


def main() -> None:
    """Print each shape's median rate and client CPU per start."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=3000)
    parser.add_argument("--many-starts", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default="threads:1,threads:4,threads:16,async64,many")
    with standalone(parser) as (args, server, probe):
        for shape in args.shapes.split(","):
            n = args.many_starts if shape == "many" else args.starts
            found = [measure(server.url, probe, shape, n, args.batch) for _ in range(args.repeat)]
            rate = statistics.median(f[0] for f in found)
            cpu = statistics.median(f[1] for f in found)
            print(f"{shape}: {rate:.0f} runs/s, {cpu:.3f} ms client CPU per start", flush=True)


if __name__ == "__main__":
    main()
