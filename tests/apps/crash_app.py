"""Workflows for the crash tests: every step leaves a row in a ledger table.

The ledger (``ledger(run_id, step, pid)``) is written when a step starts, by
plain SQL outside perdure, so it counts executions, including ones a crash cut
short. ``tx_ledger`` is written inside ``ctx.transaction`` and counts commits.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import perdure

app = perdure.App()


def _effect(run_id: str, step: str) -> int:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, step, pid) VALUES (%s, %s, %s)",
            (run_id, step, os.getpid()),
        )
    return os.getpid()


def slow(run_id: str, seconds: float) -> int:
    """Record the start, then work for ``seconds``: a crash lands in here."""
    pid = _effect(run_id, "slow")
    time.sleep(seconds)
    return pid


def record(conn: psycopg.Connection[Any], run_id: str, seconds: float) -> int:
    """Write the exactly-once effect, then hold the transaction open for ``seconds``."""
    schema = os.environ["PERDURE_SCHEMA"]
    conn.execute(
        f"INSERT INTO {schema}.tx_ledger (run_id, pid) VALUES (%s, %s)", (run_id, os.getpid())
    )
    if seconds:
        conn.execute("SELECT pg_sleep(%s)", (seconds,))
    return os.getpid()


@app.workflow("crashy")
async def crashy(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, int]:
    """first -> slow -> record (transaction) -> last."""
    first = await ctx.step("first", _effect, ctx.run_id, "first")
    slow_pid = await ctx.step("slow", slow, ctx.run_id, params.get("slow", 0))
    tx_pid = await ctx.transaction("record", record, ctx.run_id, params.get("tx_sleep", 0))
    last = await ctx.step("last", _effect, ctx.run_id, "last")
    return {"first": first, "slow": slow_pid, "record": tx_pid, "last": last}


@app.workflow("three")
def three(ctx: perdure.SyncContext, n: int) -> int:
    """Three quick steps, for the many-workers test."""
    a = ctx.step("a", _effect, ctx.run_id, "a")
    b = ctx.step("b", _effect, ctx.run_id, "b")
    c = ctx.step("c", _effect, ctx.run_id, "c")
    return n + (a > 0) + (b > 0) + (c > 0)


@app.workflow("sleepy")
async def sleepy(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, int]:
    """before -> a durable sleep -> after."""
    before = await ctx.step("before", _effect, ctx.run_id, "before")
    await ctx.sleep(params["sleep"])
    after = await ctx.step("after", _effect, ctx.run_id, "after")
    return {"before": before, "after": after}


@app.workflow("approve")
async def approve(ctx: perdure.Context, params: dict[str, Any]) -> Any:
    """Wait for an approval signal, then record it."""
    decision = await ctx.wait_for_signal("approval")
    await ctx.step("record", _effect, ctx.run_id, "record")
    return decision


def _pause(run_id: str, where: str) -> None:
    """Where PERDURE_TEST_PAUSE_AT names ``where``: record it, then block the worker's loop.

    Called from the workflow's own synchronous code right after a step
    returned, so that step's checkpoint is held (not written) while it blocks.
    """
    if os.environ.get("PERDURE_TEST_PAUSE_AT") == where:
        _effect(run_id, f"paused@{where}")
        time.sleep(120)


@app.workflow("held")
async def held(ctx: perdure.Context) -> dict[str, int]:
    """a -> (pause) -> record (transaction) -> b -> (pause) -> c."""
    a = await ctx.step("a", _effect, ctx.run_id, "a")
    _pause(ctx.run_id, "after-a")
    tx = await ctx.transaction("record", record, ctx.run_id, 0)
    b = await ctx.step("b", _effect, ctx.run_id, "b")
    _pause(ctx.run_id, "after-b")
    c = await ctx.step("c", _effect, ctx.run_id, "c")
    return {"a": a, "record": tx, "b": b, "c": c}
