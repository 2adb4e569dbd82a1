"""The workflows the HTTP API and SQL function tests start."""

from __future__ import annotations

from typing import Any

import perdure

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def define(app: perdure.App) -> None:
    """Two workflows: one that answers, one that publishes, waits for a signal and streams."""

    @app.workflow(name="echo", queue="sqlq")
    def echo(ctx: perdure.SyncContext, data: Any) -> Any:
        return {"echo": data}

    @app.workflow(name="chat")
    def chat(ctx: perdure.SyncContext, data: Any) -> Any:
        ctx.set_event("ready", {"stage": 1})
        reply = ctx.wait_for_signal("reply")
        ctx.write_stream("words", "hello")
        ctx.write_stream("words", reply)
        ctx.close_stream("words")
        return {"got": reply}
