"""An update handler may sleep and wait like the body: the run parks inside it."""

from __future__ import annotations

import threading

import perdure
from helpers import BackgroundWorker, wait_until


def test_a_handler_sleeps_and_waits_for_a_signal_before_it_replies(app: perdure.App) -> None:
    @app.workflow("desk")
    async def desk(ctx: perdure.Context) -> list[str]:
        ctx.state["log"] = []
        await ctx.wait_for_signal("close")
        return list(ctx.state["log"])

    @app.update_handler("desk")
    async def approve(ctx: perdure.Context, item: str) -> str:
        await ctx.sleep(0.2)
        verdict = await ctx.wait_for_signal("verdict", timeout=30)
        ctx.state["log"].append(f"{item}:{verdict}")
        return str(verdict)

    with BackgroundWorker(app):
        run = app.start("desk")
        wait_until(lambda: run.status() == "waiting", 20, what="the run to wait")
        replies: list[object] = []
        caller = threading.Thread(
            target=lambda: replies.append(app.update(run.id, "approve", "invoice", timeout=30))
        )
        caller.start()
        # The handler parks the run at its own sleep, then at its own signal wait.
        wait_until(
            lambda: any(
                w.get("signal") == "verdict" for w in [app.get_run(run.id).waiting_for or {}]
            ),
            20,
            what="the handler to wait for its signal",
        )
        app.signal(run.id, "verdict", "yes")
        caller.join(30)
        assert replies == ["yes"]
        app.signal(run.id, "close")
        assert run.result(timeout=20) == ["invoice:yes"]
