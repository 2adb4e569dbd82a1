"""perdure.testing with parallel shapes: inline draining, and check-replay."""

from __future__ import annotations

from typing import Any

import perdure
from perdure import testing


def test_drain_runs_gathers_children_and_graphs_inline(app: perdure.App) -> None:
    @app.workflow("leaf_inline")
    async def leaf_inline(ctx: perdure.Context, n: int) -> int:
        return n * 10

    @app.workflow("fan_inline")
    async def fan_inline(ctx: perdure.Context, n: int) -> dict[str, Any]:
        squares = await ctx.map("sq", lambda v: v * v, range(n))
        child = await ctx.start_child("leaf_inline", n)
        return {"squares": squares, "child": await child.result()}

    g = app.graph("graph_inline")

    @g.step()
    def one(ctx: perdure.StepContext, x: int) -> int:
        return x + 1

    @g.step(depends_on=[one])
    def two(ctx: perdure.StepContext, x: int) -> int:
        return x * 2

    fan = app.start("fan_inline", 3)
    graph = app.start("graph_inline", 1)
    assert app.run_until_complete(fan) == {"squares": [0, 1, 4], "child": 30}
    assert app.run_until_complete(graph) == {"two": 4}


def test_check_replay_catches_a_gather_whose_branches_changed(
    app: perdure.App, make_app: Any
) -> None:
    @app.workflow("fanv", version=1)
    async def fanv(ctx: perdure.Context) -> list[str]:
        return await ctx.gather(ctx.step("a", lambda: "a"), ctx.step("b", lambda: "b"))

    handle = app.start("fanv")
    assert app.run_until_complete(handle) == ["a", "b"]
    recorded = testing.export_runs(app, statuses=["completed"])
    assert [r.ok for r in testing.check_replay(app, recorded)] == [True]

    changed = make_app()

    @changed.workflow("fanv", version=1)
    async def fanv2(ctx: perdure.Context) -> list[str]:
        return await ctx.gather(ctx.step("a", lambda: "a"), ctx.step("c", lambda: "c"))

    (report,) = testing.check_replay(changed, recorded)
    assert not report.ok and report.position == 1
    assert (report.recorded, report.requested) == ("b", "c")


def test_check_replay_of_graph_runs_compares_step_positions(
    app: perdure.App, make_app: Any
) -> None:
    def build(target: perdure.App, names: list[str]) -> None:
        g = target.graph("chain")
        previous: list[str] = []
        for name in names:
            g.step(name, depends_on=previous)(lambda ctx, x: x)
            previous = [name]

    build(app, ["x", "y"])
    handle = app.start("chain", 5)
    assert app.run_until_complete(handle) == {"y": 5}
    recorded = testing.export_runs(app, statuses=["completed"])
    assert testing.check_replay(app, recorded)[0].ok

    renamed = make_app()
    build(renamed, ["x", "z"])
    (report,) = testing.check_replay(renamed, recorded)
    assert not report.ok and (report.position, report.recorded, report.requested) == (1, "y", "z")
