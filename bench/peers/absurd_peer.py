"""Absurd (SQL stored procedures + its Python SDK): the 3-step no-op workflow.

Absurd's schema is the SQL that `absurdctl` 0.5.1 (PyPI) bundles, applied
with psql into the fixed schema ``absurd``. The tasks are spawned first; at
the go, ``AsyncAbsurd.start_worker`` (one connection, ``--concurrency`` tasks
at a time) executes them while the peer polls the task table until every
task completed, and reports its polls so that they are not counted as
Absurd's.

With ``--fanout N``: with the worker running and idle, N tasks of one step
are spawned (32 spawns in flight at once) and waited for (by polling the
task table every 5 ms).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import absurdctl
import psycopg
from absurd_sdk import AsyncAbsurd
from common import arguments, fan_out, finish

QUEUE = "bench"


def _install(url: str) -> None:
    """Apply Absurd's bundled schema once (it is not idempotent) and create the queue."""
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regnamespace('absurd')").fetchone() == (None,):
            psql = Path(os.environ.get("PERDURE_BENCH_BIN", "")) / "psql"
            subprocess.run(
                [
                    str(psql) if psql.name and psql.exists() else "psql",
                    "-X",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-d",
                    url,
                ],
                input=absurdctl.BUNDLED_SCHEMA_SQL.encode(),
                check=True,
                stdout=subprocess.DEVNULL,
            )
        conn.execute("SELECT absurd.drop_queue(%s)", (QUEUE,))
        conn.execute("SELECT absurd.create_queue(%s)", (QUEUE,))


async def main() -> None:
    """Set up, spawn, hand shake, execute."""
    args = arguments()
    _install(args.database_url)
    app = AsyncAbsurd(args.database_url, queue_name=QUEUE)

    @app.register_task("noop3")
    async def noop3(params: Any, ctx: Any) -> int:
        async def one() -> int:
            return 1

        return await ctx.step("a", one) + await ctx.step("b", one) + await ctx.step("c", one)

    if args.fanout:
        await _fan_out(app, args.database_url, args.fanout, args.fanouts, args.concurrency)
        return
    for _ in range(args.runs):
        await app.spawn("noop3", {"n": 1})
    polls = 0
    async with await psycopg.AsyncConnection.connect(args.database_url, autocommit=True) as conn:
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, input)
        started = time.perf_counter()
        worker = asyncio.create_task(
            app.start_worker(concurrency=args.concurrency, poll_interval=0.01)
        )
        while True:
            polls += 1
            row = await (
                await conn.execute("SELECT count(*) FROM absurd.t_bench WHERE state = 'completed'")
            ).fetchone()
            if row is not None and row[0] >= args.runs:
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        app.stop_worker()
        await worker
    result = {"runs": args.runs, "seconds": seconds, "runs_per_s": args.runs / seconds}
    print(json.dumps({**result, "own_statements": polls}), flush=True)
    await app.close()


async def _fan_out(app: AsyncAbsurd, url: str, width: int, times: int, concurrency: int) -> None:
    """Time ``times`` fan-outs of ``width`` one-step tasks on a running worker."""

    @app.register_task("leaf")
    async def leaf(params: Any, ctx: Any) -> int:
        async def one() -> int:
            return int(params["i"])

        return int(await ctx.step("one", one))

    worker = asyncio.create_task(app.start_worker(concurrency=concurrency, poll_interval=0.01))
    done = 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # Spawns in flight at once: each takes a connection of its own, and a
        # thousand connecting together overflow the server's listen backlog.
        gate = asyncio.Semaphore(32)

        async def spawn(i: int) -> None:
            async with gate:
                await app.spawn("leaf", {"i": i})

        async def once() -> None:
            nonlocal done
            await asyncio.gather(*(spawn(i) for i in range(width)))
            done += width
            while True:
                row = await (
                    await conn.execute(
                        "SELECT count(*) FROM absurd.t_bench WHERE state = 'completed'"
                    )
                ).fetchone()
                if row is not None and row[0] >= done:
                    return
                await asyncio.sleep(0.005)

        await fan_out(once, width, times)
    app.stop_worker()
    await worker
    await app.close()


if __name__ == "__main__":
    asyncio.run(main())
    finish()
