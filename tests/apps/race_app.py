"""A race for the crash test: approve (signal), reject (event) or escalate (timer), then
a step that records the winner in a ledger table and, on its first execution only,
works long enough for a SIGKILL to land in it."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import perdure

app = perdure.App()


def after(run_id: str, winner: str) -> int:
    """Record the winner (outside perdure, so every execution counts); the first
    execution then works for 60 s: the test kills its worker meanwhile."""
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, step, pid) VALUES (%s, %s, %s)",
            (run_id, winner, os.getpid()),
        )
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.ledger WHERE run_id = %s", (run_id,)
        ).fetchone()
    if row is not None and row[0] == 1:
        time.sleep(60)
    return os.getpid()


@app.workflow("decide")
async def decide(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
    """The first of approve, reject and escalate; then the step ``after``."""
    first = await ctx.wait_first(
        approve=ctx.signal("approve"),
        reject=ctx.event("order.rejected", match={"order": params["order"]}),
        escalate=ctx.timer(seconds=params["escalate_after"]),
    )
    pid = await ctx.step("after", after, ctx.run_id, first.name)
    return {"winner": first.name, "pid": pid}
