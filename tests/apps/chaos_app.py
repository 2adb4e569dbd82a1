"""The chaos workload: every shape of work perdure has, each leaving a trace.

Each plain step's function writes a row to ``chaos_ledger`` when it starts
(with its process id and the server's clock) and stamps ``finished`` when it
ends, by plain SQL outside perdure: the ledger counts real executions,
including those a fault cut short. Each ``ctx.transaction`` step writes a row
to ``chaos_tx`` inside the step's transaction: that table counts commits.

``STEPS`` names, per workflow, the plain and transaction steps a completed run
must have recorded; the checker (tests/chaos/checker.py) holds runs to it.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import psycopg

import perdure

app = perdure.App()

QUEUE = "chaos"
#: Effects write through their own connection, which a fault may cut: retry
#: them for as long as an outage of the chaos suite may last.
PATIENT = perdure.RetryPolicy(max_attempts=60, initial_delay=0.2, max_delay=2.0)

#: (plain steps, transaction steps) of each workflow, for the checker.
STEPS: dict[str, tuple[list[str], list[str]]] = {
    "chaos_linear": (["prepare", "finish"], ["record"]),
    "chaos_signal": (["prepare"], ["record"]),
    "chaos_fanout": (["left", "right", "part[0]", "part[1]", "part[2]"], ["record"]),
    "chaos_parent": (["prepare"], ["record"]),
    "chaos_graph": (["a", "b", "c", "d"], []),
}

LEDGER_DDL = (
    "CREATE TABLE {s}.chaos_ledger (id bigserial PRIMARY KEY, run_id uuid NOT NULL, "
    "step text NOT NULL, pid int NOT NULL, started timestamptz NOT NULL, finished timestamptz)",
    "CREATE TABLE {s}.chaos_tx (id bigserial PRIMARY KEY, run_id uuid NOT NULL, "
    "step text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
)


def _sql(query: str, *params: Any) -> Any:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(
        os.environ["PERDURE_DATABASE_URL"], autocommit=True, connect_timeout=5
    ) as conn:
        return conn.execute(query.replace("{s}", schema), params).fetchone()


def effect(run_id: str, step: str, seconds: float) -> int:
    """A plain step's side effect: record the start, work, record the end."""
    (row,) = _sql(
        "INSERT INTO {s}.chaos_ledger (run_id, step, pid, started) "
        "VALUES (%s, %s, %s, clock_timestamp()) RETURNING id",
        run_id,
        step,
        os.getpid(),
    )
    time.sleep(seconds)
    _sql("UPDATE {s}.chaos_ledger SET finished = clock_timestamp() WHERE id = %s RETURNING id", row)
    return os.getpid()


def record(conn: psycopg.Connection[Any], run_id: str, step: str) -> int:
    """A transaction step's effect: one row, committed with the checkpoint."""
    schema = os.environ["PERDURE_SCHEMA"]
    conn.execute(
        f"INSERT INTO {schema}.chaos_tx (run_id, step, pid) VALUES (%s, %s, %s)",
        (run_id, step, os.getpid()),
    )
    return os.getpid()


async def record_async(conn: psycopg.AsyncConnection[Any], run_id: str, step: str) -> int:
    """:func:`record` for the async connection of an ``async def`` transaction."""
    schema = os.environ["PERDURE_SCHEMA"]
    await conn.execute(
        f"INSERT INTO {schema}.chaos_tx (run_id, step, pid) VALUES (%s, %s, %s)",
        (run_id, step, os.getpid()),
    )
    return os.getpid()


def _work(ctx: perdure.Context | perdure.SyncContext, p: dict[str, Any], step: str) -> Any:
    return ctx.step(step, effect, ctx.run_id, step, p["work"], retry=PATIENT)


@app.workflow("chaos_linear", queue=QUEUE, retry=PATIENT)
async def chaos_linear(ctx: perdure.Context, p: dict[str, Any]) -> dict[str, Any]:
    """Step, transaction, durable sleep, step."""
    first = await _work(ctx, p, "prepare")
    tx = await ctx.transaction("record", record_async, ctx.run_id, "record", retry=PATIENT)
    await ctx.sleep(p["sleep"])
    last = await _work(ctx, p, "finish")
    return {"prepare": first, "record": tx, "finish": last}


@app.workflow("chaos_signal", queue=QUEUE, retry=PATIENT)
def chaos_signal(ctx: perdure.SyncContext, p: dict[str, Any]) -> Any:
    """Step, wait for the signal ``go``, transaction (a plain ``def`` workflow)."""
    _work(ctx, p, "prepare")
    payload = ctx.wait_for_signal("go", timeout=3600)
    ctx.transaction("record", record, ctx.run_id, "record", retry=PATIENT)
    return payload


@app.workflow("chaos_fanout", queue=QUEUE, retry=PATIENT)
async def chaos_fanout(ctx: perdure.Context, p: dict[str, Any]) -> dict[str, Any]:
    """A gather of two steps, a map of three, then a transaction."""
    left, right = await ctx.gather(_work(ctx, p, "left"), _work(ctx, p, "right"))
    part = functools.partial(_part, ctx.run_id, p["work"])
    parts = await ctx.map("part", part, [0, 1, 2], retry=PATIENT)
    await ctx.transaction("record", record_async, ctx.run_id, "record", retry=PATIENT)
    return {"left": left, "right": right, "parts": parts}


def _part(run_id: str, seconds: float, index: int) -> int:
    return effect(run_id, f"part[{index}]", seconds)


@app.workflow("chaos_parent", queue=QUEUE, retry=PATIENT)
async def chaos_parent(ctx: perdure.Context, p: dict[str, Any]) -> dict[str, Any]:
    """Step, a child run (a chaos_linear), its result, transaction."""
    await _work(ctx, p, "prepare")
    child = await ctx.start_child("chaos_linear", {"work": p["work"], "sleep": p["sleep"]})
    result = await child.result()
    await ctx.transaction("record", record_async, ctx.run_id, "record", retry=PATIENT)
    return {"child": child.run_id, "result": result}


graph = app.graph("chaos_graph", queue=QUEUE, retry=PATIENT)


def _graph_step(name: str) -> Any:
    def step(ctx: perdure.StepContext, value: Any) -> dict[str, Any]:
        seconds = value["work"] if "work" in value else next(iter(value.values()))["work"]
        effect(ctx.run_id, name, seconds)
        return {"work": seconds}

    step.__name__ = name
    return step


# A diamond: a -> (b, c) -> d.
graph.step("a", retry=PATIENT)(_graph_step("a"))
graph.step("b", depends_on=["a"], retry=PATIENT)(_graph_step("b"))
graph.step("c", depends_on=["a"], retry=PATIENT)(_graph_step("c"))
graph.step("d", depends_on=["b", "c"], retry=PATIENT)(_graph_step("d"))
