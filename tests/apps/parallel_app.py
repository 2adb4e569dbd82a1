"""Workflows for the multi-process tests of parallel steps, graphs and sagas.

Every step writes a row to ``ledger(run_id, step, pid, started, finished)``
with plain SQL outside perdure, so the ledger counts real executions
(including ones a crash cut short) and their times.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

import psycopg

import perdure

app = perdure.App()


def _sql(query: str, *params: Any) -> Any:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        return conn.execute(query.replace("{s}", schema), params).fetchone()


def work(run_id: str, step: str, seconds: float) -> int:
    """Record the start, work for ``seconds``, record the end: a crash lands in here."""
    (row_id,) = _sql(
        "INSERT INTO {s}.ledger (run_id, step, pid, started) "
        "VALUES (%s, %s, %s, clock_timestamp()) RETURNING id",
        run_id,
        step,
        os.getpid(),
    )
    time.sleep(seconds)
    _sql("UPDATE {s}.ledger SET finished = clock_timestamp() WHERE id = %s RETURNING id", row_id)
    return os.getpid()


# A diamond: a -> (b, c) -> d --------------------------------------------------------

diamond = app.graph("diamond")


@diamond.step()
def a(ctx: perdure.StepContext, seconds: float) -> float:
    work(ctx.run_id, "a", 0)
    return seconds


@diamond.step(depends_on=[a])
def b(ctx: perdure.StepContext, seconds: float) -> dict[str, int]:
    return {"b": work(ctx.run_id, "b", seconds)}


@diamond.step(depends_on=[a])
def c(ctx: perdure.StepContext, seconds: float) -> dict[str, int]:
    return {"c": work(ctx.run_id, "c", seconds)}


@diamond.step(depends_on=[b, c])
def d(ctx: perdure.StepContext, outputs: dict[str, Any]) -> dict[str, Any]:
    work(ctx.run_id, "d", 0)
    return outputs


# ctx.map over many items --------------------------------------------------------------


def _item(run_id: str, item: int, seconds: float) -> int:
    work(run_id, f"item{item}", seconds)
    return item * item


@app.workflow("fan_out")
async def fan_out(ctx: perdure.Context, params: dict[str, Any]) -> list[int]:
    """One parallel step per item; each sleeps ``seconds``."""
    items = list(range(params["items"]))
    square = functools.partial(_item, ctx.run_id, seconds=params["seconds"])
    return await ctx.map("square", square, items)


# A 4-step saga failing at step 4, in both shapes ------------------------------------


def _undo(ctx: perdure.StepContext, out: dict[str, Any]) -> None:
    work(ctx.run_id, f"undo_{out['step']}", out["undo_seconds"])


saga = app.graph("saga")


def _saga_step(name: str, fail: bool = False) -> Any:
    def step(ctx: perdure.StepContext, params: Any) -> dict[str, Any]:
        work(ctx.run_id, name, 0)
        if fail:
            raise perdure.PermanentError(f"{name} failed")
        return {"step": name, "undo_seconds": params["undo_seconds"]}

    step.__name__ = name
    return step


s1 = saga.step("s1", compensate=_undo)(_saga_step("s1"))
s2 = saga.step("s2", depends_on=["s1"], compensate=_undo)(_saga_step("s2"))
s3 = saga.step("s3", depends_on=["s2"], compensate=_undo)(_saga_step("s3"))
s4 = saga.step("s4", depends_on=["s3"], compensate=_undo)(_saga_step("s4", fail=True))


def _undo_fn(run_id: str, step: str, seconds: float) -> None:
    work(run_id, f"undo_{step}", seconds)


@app.workflow("saga_fn")
async def saga_fn(ctx: perdure.Context, params: dict[str, Any]) -> None:
    """The same saga as a function workflow with ctx.on_rollback."""
    for name in ("s1", "s2", "s3"):
        await ctx.step(name, work, ctx.run_id, name, 0)
        ctx.on_rollback(_undo_fn, ctx.run_id, name, params["undo_seconds"], name=f"undo_{name}")
    await ctx.step("s4", _fail, ctx.run_id)


def _fail(run_id: str) -> None:
    work(run_id, "s4", 0)
    raise perdure.PermanentError("s4 failed")


# A wide map: each execution of an item appends "pid item" to a file --------------


async def note(item: int) -> int:
    """Record this execution of ``item`` in the file PERDURE_TEST_NOTES names."""
    with open(os.environ["PERDURE_TEST_NOTES"], "a") as notes:
        notes.write(f"{os.getpid()} {item}\n")
    await asyncio.sleep(0.002)
    return item


@app.workflow("wide_map")
async def wide_map(ctx: perdure.Context, n: int) -> list[int]:
    """``ctx.map`` of ``note`` over ``n`` items."""
    return await ctx.map("note", note, range(n))
