"""The workflows the dashboard tests look at, and a known workload of their runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import perdure
from helpers import wait_until

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}
#: The script every page must show as text, never run.
SCRIPT = "<script>window.__pwned = 1</script>"


class Flaky:
    """A switch the flaky step reads: it fails while ``failing`` is True."""

    failing = True


def define(app: perdure.App) -> None:
    """Register the test workflows on ``app``."""

    @app.workflow("greet")
    async def greet(ctx: perdure.Context, who: Any) -> str:
        name = await ctx.step("lookup", lambda: str(who))
        return await ctx.step("compose", lambda: f"hello {name}")

    def explode() -> None:
        raise ValueError("boom: the <b>gateway</b> said no")

    @app.workflow("explode")
    async def explode_wf(ctx: perdure.Context, order: Any) -> None:
        await ctx.step("prepare", lambda: "ready")
        await ctx.step(
            "charge", explode, retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0.05)
        )

    def flaky_step() -> str:
        if Flaky.failing:
            raise RuntimeError("the service is down")
        return "served"

    @app.workflow("flaky")
    async def flaky(ctx: perdure.Context, input: Any) -> str:
        return await ctx.step("call", flaky_step, retry=perdure.RetryPolicy(max_attempts=1))

    @app.workflow("approval")
    async def approval(ctx: perdure.Context, doc: Any) -> Any:
        await ctx.step("submit", lambda: "submitted")
        decision = await ctx.wait_for_signal("approve")
        return {"decision": decision}

    etl = app.graph("etl")

    @etl.step()
    def extract(ctx: perdure.StepContext, input: Any) -> list[int]:
        return [1, 2, 3]

    @etl.step(depends_on=[extract])
    def clean(ctx: perdure.StepContext, rows: list[int]) -> list[int]:
        return [r for r in rows if r > 1]

    @etl.step(depends_on=[extract])
    def count(ctx: perdure.StepContext, rows: list[int]) -> int:
        return len(rows)

    @etl.step(depends_on=[clean, count])
    def load(ctx: perdure.StepContext, parts: dict[str, Any]) -> str:
        return f"loaded {parts['count']}"


@dataclass
class Workload:
    """The runs of the known workload, by what they became."""

    greeted: list[str]
    failed: str
    flaky: str
    waiting: str
    graph: str
    scripted: str


def run_workload(app: perdure.App) -> Workload:
    """Start the known workload and wait (a worker must be running) until it settles.

    5 greet runs complete (one with a <script> input), 1 explode and 1 flaky
    fail, 1 approval waits for its signal, 1 etl graph completes.
    """
    greeted = [app.start("greet", f"user-{i}", key=f"greet:{i}").id for i in range(4)]
    scripted = app.start("greet", {"comment": SCRIPT}, key=f"xss:{SCRIPT}").id
    failed = app.start("explode", {"order": 7}, key="order:7").id
    flaky = app.start("flaky", None, key="flaky:1").id
    waiting = app.start("approval", {"doc": 1}, key="doc:1").id
    graph = app.start("etl", {"day": "today"}, key="etl:today").id
    finals = {"completed", "failed"}
    for run_id in [*greeted, scripted, failed, flaky, graph]:
        wait_until(lambda r=run_id: app.get_run(r).status.value in finals, 30, what=run_id)
    wait_until(lambda: app.get_run(waiting).status.value == "waiting", 30, what="the wait")
    return Workload(greeted, failed, flaky, waiting, graph, scripted)
