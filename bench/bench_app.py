"""The workflows `perdure bench` runs, served by a `perdure worker bench_app:app` process.

- ``bench_noop3``: three no-op steps, the throughput workload (the same as the peers').
- ``bench_first``: its first step reports when it began (start -> first step latency).
- ``bench_signal``: waits for signal ``go``; the step after reports when it began.
- ``bench_fanout``: a graph: one root, 100 parallel steps, one join.
- ``bench_fanout1000``: the same with 1,000 parallel steps.
- ``bench_chain``: a graph of 10 steps, each depending on the one before.
- ``bench_map``: ``ctx.map`` of a no-op step over ``n`` items (the input).
- ``bench_sequence``: the same ``n`` no-op steps one after another.
- ``bench_gather_sleep``: ``ctx.gather`` of ``n`` steps that each sleep 50 ms.
- ``bench_updates``: waits for signal ``stop``, serving update ``bump`` (one
  no-op step, then the payload back) meanwhile.
- ``bench_pair``: ``ctx.gather`` of two steps of 0.8 s; when each began.
- ``bench_diamond``: a graph: a root, two steps of 0.8 s, a join; when each of the two began.
- ``bench_event_load``: waits for event ``load.paid`` matching its order (the input); the
  step after reports when it began (bench/event_load.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import perdure

app = perdure.App()

FANOUT = 100
CHAIN = 10


async def _noop() -> int:
    return 1


@app.workflow("bench_noop3")
async def bench_noop3(ctx: perdure.Context, _: Any = None) -> int:
    """Three no-op steps."""
    a = await ctx.step("a", _noop)
    b = await ctx.step("b", _noop)
    c = await ctx.step("c", _noop)
    return a + b + c


@app.workflow("bench_first")
async def bench_first(ctx: perdure.Context, _: Any = None) -> float:
    """The first step's start time (time.time() of this machine)."""
    return await ctx.step("first", _now)


@app.workflow("bench_signal")
async def bench_signal(ctx: perdure.Context, _: Any = None) -> float:
    """Wait for ``go``, then report when the next step began."""
    await ctx.wait_for_signal("go")
    return await ctx.step("after", _now)


async def _now() -> float:
    return time.time()


@app.workflow("bench_event_load")
async def bench_event_load(ctx: perdure.Context, order: int) -> float:
    """Wait for ``load.paid`` of order ``order``, then report when the next step began."""
    await ctx.wait_for_event("load.paid", {"order_id": order}, timeout=3600)
    return await ctx.step("after", _now)


@app.workflow("bench_updates")
async def bench_updates(ctx: perdure.Context, _: Any = None) -> None:
    """Serve updates until ``stop``."""
    await ctx.wait_for_signal("stop")


@app.update_handler("bench_updates")
async def bump(ctx: perdure.Context, n: int) -> int:
    """One no-op step, then ``n`` back."""
    await ctx.step("bump", _noop)
    return n


async def _item(item: int) -> int:
    return item


@app.workflow("bench_map")
async def bench_map(ctx: perdure.Context, n: int) -> int:
    """``ctx.map`` over ``n`` items; the number of outputs."""
    return len(await ctx.map("item", _item, range(n)))


@app.workflow("bench_sequence")
async def bench_sequence(ctx: perdure.Context, n: int) -> int:
    """The same ``n`` steps as bench_map, one after another."""
    for i in range(n):
        await ctx.step(f"item[{i}]", _item, i)
    return n


async def _nap() -> int:
    await asyncio.sleep(0.05)
    return 1


@app.workflow("bench_gather_sleep")
async def bench_gather_sleep(ctx: perdure.Context, n: int) -> int:
    """``ctx.gather`` of ``n`` steps that each sleep 50 ms."""
    return sum(await ctx.gather(*(ctx.step(f"nap{i}", _nap) for i in range(n))))


fanout = app.graph("bench_fanout")


@fanout.step()
async def root(ctx: perdure.StepContext, _: Any) -> int:
    """The fan-out's first step."""
    return 0


async def _leaf_async(ctx: perdure.StepContext, value: int | None) -> int:
    return (value or 0) + 1


for _i in range(FANOUT):
    fanout.step(f"leaf{_i:03d}", depends_on=[root])(_leaf_async)


@fanout.step(depends_on=[f"leaf{i:03d}" for i in range(FANOUT)])
async def join(ctx: perdure.StepContext, outputs: dict[str, int]) -> int:
    """The join: the sum of the leaves."""
    return sum(outputs.values())


WIDE = 1000
wide = app.graph("bench_fanout1000")


@wide.step()
async def wide_root(ctx: perdure.StepContext, _: Any) -> int:
    """The wide fan-out's first step."""
    return 0


for _i in range(WIDE):
    wide.step(f"leaf{_i:04d}", depends_on=[wide_root])(_leaf_async)


@wide.step(depends_on=[f"leaf{i:04d}" for i in range(WIDE)])
async def wide_join(ctx: perdure.StepContext, outputs: dict[str, int]) -> int:
    """The join: the sum of the leaves."""
    return sum(outputs.values())


chain = app.graph("bench_chain")
_previous: list[str] = []
for _i in range(CHAIN):
    chain.step(f"link{_i}", depends_on=_previous)(_leaf_async)
    _previous = [f"link{_i}"]


PAIR_SECONDS = 0.8


async def _began_then_work(ctx: perdure.StepContext | None = None, _: Any = None) -> float:
    """When the step began (time.time() of this machine); then 0.8 s of work."""
    began = time.time()
    await asyncio.sleep(PAIR_SECONDS)
    return began


async def _pair_step() -> float:
    return await _began_then_work()


@app.workflow("bench_pair")
async def bench_pair(ctx: perdure.Context, _: Any = None) -> list[float]:
    """``ctx.gather`` of two 0.8 s steps: when each began."""
    return list(await ctx.gather(ctx.step("left", _pair_step), ctx.step("right", _pair_step)))


diamond = app.graph("bench_diamond")


@diamond.step()
async def top(ctx: perdure.StepContext, _: Any) -> int:
    """The diamond's root."""
    return 0


diamond.step("left", depends_on=[top])(_began_then_work)
diamond.step("right", depends_on=[top])(_began_then_work)


@diamond.step(depends_on=["left", "right"])
async def bottom(ctx: perdure.StepContext, began: dict[str, float]) -> list[float]:
    """The join: when each of the two middle steps began."""
    return [began["left"], began["right"]]
