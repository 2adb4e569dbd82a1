"""Parallel steps start together on a fleet of single-slot workers.

The worker that reaches a gather or a graph's parallel steps holds the run in
its one slot: it runs one step itself and hands the others to the fleet at
once, instead of keeping them for a head start it could not use. So the two
steps of a gather, and the two middle steps of a diamond, start within a
moment of each other (the bench, bench/parallel_start.py, measures how close;
here the bound is generous for a loaded machine).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from typing import Any

import perdure
from helpers import BackgroundWorker, wait_until

#: Far below the head start (0.5 s) that used to separate them.
SKEW_BOUND = 0.25


async def _began_then_work(ctx: perdure.StepContext | None = None, _: Any = None) -> float:
    began = time.time()
    await asyncio.sleep(0.8)
    return began


async def _pair_step() -> float:
    return await _began_then_work()


def test_the_parallel_steps_of_a_gather_and_a_graph_start_together(app: perdure.App) -> None:
    @app.workflow("pair")
    async def pair(ctx: perdure.Context) -> list[float]:
        return list(await ctx.gather(ctx.step("left", _pair_step), ctx.step("right", _pair_step)))

    diamond = app.graph("diamond")

    @diamond.step()
    async def top(ctx: perdure.StepContext, _: Any) -> int:
        return 0

    diamond.step("left", depends_on=[top])(_began_then_work)
    diamond.step("right", depends_on=[top])(_began_then_work)

    @diamond.step(depends_on=["left", "right"])
    async def bottom(ctx: perdure.StepContext, began: dict[str, float]) -> list[float]:
        return [began["left"], began["right"]]

    with ExitStack() as stack:
        fleet = [
            stack.enter_context(BackgroundWorker(app, worker_id=f"w{i}", concurrency=1))
            for i in range(3)
        ]
        wait_until(
            lambda: all(len(w.recorder.args("ranked")) >= 2 for w in fleet),
            20,
            what="the fleet's places",
        )
        for workflow in ("pair", "diamond", "pair", "diamond"):
            found = app.start(workflow).result(timeout=30)
            left, right = found["bottom"] if workflow == "diamond" else found  # a graph's sinks
            assert abs(left - right) < SKEW_BOUND, f"{workflow}: {abs(left - right):.3f} s apart"
