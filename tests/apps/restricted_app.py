"""Workflows that touch every kind of row a worker writes, for the least-privilege tests.

A worker running these as a role with row access only (``perdure migrate
--grant-to``) must complete them: parallel steps and a map (step tasks), a
signal wait, an event, a child run, a database step, a queue with a global
concurrency limit (its row is locked by the claim) and a graph with an
approval gate.
"""

from __future__ import annotations

import os
from typing import Any

import perdure

app = perdure.App()
limited = app.queue("restricted", concurrency=4, worker_concurrency=4)


def double(value: int) -> int:
    """A plain step."""
    return value * 2


def whoami(conn: Any) -> str:
    """A database step: the role the worker's connection runs as."""
    row = conn.execute("SELECT current_user").fetchone()
    return str(row[0])


@app.workflow("child", queue=limited.name)
async def child(ctx: perdure.Context, value: int) -> int:
    """A child run."""
    return await ctx.step("child_step", double, value)


@app.workflow("approval", queue=limited.name)
async def approval(ctx: perdure.Context, value: int) -> dict[str, Any]:
    """Parallel steps, a map, an event, a signal wait, a child and a database step."""
    left, right = await ctx.gather(
        ctx.step("left", double, value), ctx.step("right", double, value + 1)
    )
    mapped = await ctx.map("each", double, [1, 2, 3])
    await ctx.set_event("stage", "waiting for approval")
    decision = await ctx.wait_for_signal("approve", timeout=120)
    kid = await ctx.start_child("child", value)
    role = await ctx.transaction("whoami", whoami)
    return {
        "sum": left + right + sum(mapped),
        "decision": decision,
        "child": await kid.result(),
        "role": role,
        "pid": os.getpid(),
    }


@app.update_handler("approval")
async def note(ctx: perdure.Context, value: int) -> int:
    """An update whose handler runs a step, as the restricted role."""
    return int(await ctx.step("note", double, value))


gate = app.graph("gated", queue=limited.name)


@gate.step()
def prepare(ctx: perdure.StepContext, value: int) -> int:
    """The graph's first step."""
    return value + 1


@gate.step(depends_on=[prepare], wait_for_signal="publish")
def publish(ctx: perdure.StepContext, value: int) -> dict[str, Any]:
    """Runs once the 'publish' signal arrives."""
    return {"value": value, "signal": ctx.signal}
