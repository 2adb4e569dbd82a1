"""Early replies: ``ctx.reply`` answers the caller while the handler and the run go on."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing


def _shop(app: perdure.App, gate: threading.Event) -> None:
    """``shop`` waits for ``checkout``; update ``pay`` replies, then captures (a step
    that blocks until ``gate`` is set), then returns a value that is no reply."""

    @app.workflow("shop")
    async def shop(ctx: perdure.Context) -> list[str]:
        ctx.state["paid"] = []
        await ctx.wait_for_signal("checkout")
        return list(ctx.state["paid"])

    @app.update_handler("shop")
    async def pay(ctx: perdure.Context, amount: int) -> str:
        await ctx.reply({"authorised": amount})
        await ctx.step("capture", lambda: gate.wait(60))
        ctx.state["paid"].append(f"paid {amount}")
        return "not a reply"

    @app.update_handler("shop")
    async def twice(ctx: perdure.Context) -> None:
        await ctx.reply(1)
        try:
            await ctx.reply(2)
        except perdure.WorkflowDefinitionError as exc:
            ctx.state["paid"].append(str(exc))
        raise RuntimeError("after the reply")


def test_the_caller_gets_an_early_reply_while_the_handler_goes_on(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    gate = threading.Event()
    _shop(app, gate)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("shop")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        assert app.update(handle.id, "pay", 5, update_id="p-1", timeout=30) == {"authorised": 5}
        # The reply is stored while the handler's next step still runs.
        (row,) = app.updates(handle.id)
        assert row["status"] == "completed" and not gate.is_set()
        capture = db.execute(
            "SELECT count(*) FROM steps WHERE run_id = %s AND name = 'capture'"
            " AND status = 'completed'",
            (handle.id,),
        ).fetchone()
        assert capture == (0,)
        gate.set()
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["paid 5"]
        # The handler's return value was not a second reply; the same id finds the first.
        assert app.update(handle.id, "pay", 5, update_id="p-1", timeout=30) == {"authorised": 5}
    (row,) = app.updates(handle.id)
    assert row["result"] == {"authorised": 5}
    events = [e.event for e in app.history(handle.id)]
    assert events.count("update_accepted") == 1 and events.count("update_completed") == 1


def test_a_second_reply_is_refused_and_a_later_error_is_no_reply(app: perdure.App) -> None:
    _shop(app, threading.Event())
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("shop")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        assert app.update(handle.id, "twice", timeout=30) == 1
        wait_until(lambda: handle.status() == "waiting", what="the wait again")
        # check-replay passes both replies again and writes nothing.
        (report,) = testing.check_replay(app)
        assert report.ok, report.describe()
        app.signal(handle.id, "checkout")
        (message,) = handle.result(timeout=30)
    assert "was replied to already" in message
    (row,) = app.updates(handle.id)
    assert (row["status"], row["result"], row["error"]) == ("completed", 1, None)
    events = [e.event for e in app.history(handle.id)]
    assert "update_failed" not in events and events.count("update_completed") == 1


def test_a_reply_outside_an_update_handler_is_refused(app: perdure.App) -> None:
    @app.workflow("lone")
    async def lone(ctx: perdure.Context) -> str:
        try:
            await ctx.reply("hello")
        except perdure.WorkflowDefinitionError as exc:
            return str(exc)
        return "replied"

    with BackgroundWorker(app, concurrency=2):
        handle = app.start("lone")
        assert "call it in an update handler" in handle.result(timeout=30)
