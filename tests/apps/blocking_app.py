"""A workflow whose async step blocks the event loop (``time.sleep`` in ``async def``).

Each execution of the step leaves a row in ``ledger(run_id, step, pid)``,
written by plain SQL outside perdure, so that the test counts executions.
"""

from __future__ import annotations

import os
import time

import psycopg

import perdure

app = perdure.App()


async def blocking(run_id: str, seconds: float) -> int:
    """Record the start, then hold the event loop for ``seconds`` without yielding."""
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, step, pid) VALUES (%s, %s, %s)",
            (run_id, "blocking", os.getpid()),
        )
    time.sleep(seconds)  # the mistake: await asyncio.sleep(seconds) was meant
    return os.getpid()


@app.workflow("blocker")
async def blocker(ctx: perdure.Context, seconds: float) -> int:
    """One step that blocks the loop for ``seconds``."""
    return await ctx.step("block", blocking, ctx.run_id, seconds)
