"""Updates served where a run waits for an event or for a child run's result."""

from __future__ import annotations

from typing import Any

import psycopg

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing


def _noted(app: perdure.App, workflow: str) -> None:
    """Update ``note`` of ``workflow``: a step, then the note kept in ``ctx.state``."""

    @app.update_handler(workflow)
    async def note(ctx: perdure.Context, text: str) -> int:
        await ctx.step("note", lambda: text)
        ctx.state.setdefault("notes", []).append(text)
        return len(ctx.state["notes"])


def _anchors(app: perdure.App, run_id: str) -> list[tuple[str, int, int]]:
    return [(u["status"], u["anchor_position"], u["seq"]) for u in app.updates(run_id)]


def test_a_run_waiting_for_an_event_serves_updates_and_still_takes_its_event(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("invoice")
    async def invoice(ctx: perdure.Context, order: int) -> dict[str, Any]:
        ctx.state["notes"] = []
        event = await ctx.wait_for_event("order.paid", {"order_id": order}, timeout=600)
        return {"paid": event.payload["amount"], "notes": list(ctx.state["notes"])}

    _noted(app, "invoice")
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("invoice", 7)
        wait_until(lambda: handle.status() == "waiting", what="the event wait")
        assert app.update(handle.id, "note", "first", timeout=30) == 1
        assert app.update(handle.id, "note", "second", timeout=30) == 2
        # Back at the same wait, still filed for the emitter.
        wait_until(lambda: handle.status() == "waiting", what="the wait again")
        assert handle.get().waiting_for["event"] == "order.paid"  # type: ignore[index]
        # check-replay applies them again at the event wait (open runs only).
        (report,) = testing.check_replay(app)
        assert report.ok and report.replayed == 3, report.describe()
        app.emit("order.paid", {"order_id": 7, "amount": 30})
        assert handle.result(timeout=30) == {"paid": 30, "notes": ["first", "second"]}
    # Both applied at the event wait (position 0), in the order sent.
    assert _anchors(app, handle.id) == [("completed", 0, 0), ("completed", 0, 1)]


def test_a_parent_waiting_for_its_child_serves_updates_and_gets_the_result(
    app: perdure.App,
) -> None:
    @app.workflow("worker_job")
    async def worker_job(ctx: perdure.Context) -> str:
        return str(await ctx.wait_for_signal("finish"))

    @app.workflow("manager")
    async def manager(ctx: perdure.Context) -> dict[str, Any]:
        ctx.state["notes"] = []
        child = await ctx.start_child("worker_job", key="the-child")
        result = await child.result()
        return {"child": result, "notes": list(ctx.state["notes"])}

    _noted(app, "manager")
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("manager")
        wait_until(lambda: handle.status() == "waiting", what="the parent's wait")
        wait_until(lambda: app.get_run("the-child").status == "waiting", what="the child")
        assert app.update(handle.id, "note", "first", timeout=30) == 1
        wait_until(lambda: handle.status() == "waiting", what="the parent's wait again")
        reports = testing.check_replay(app)
        assert len(reports) == 2 and all(r.ok for r in reports), [r.describe() for r in reports]
        app.signal("the-child", "finish", "done")
        assert handle.result(timeout=30) == {"child": "done", "notes": ["first"]}
    # Applied at the wait for the child's result (position 1, after the start).
    assert _anchors(app, handle.id) == [("completed", 1, 0)]


def test_a_child_that_finishes_while_updates_are_served_still_wakes_its_parent(
    app: perdure.App,
) -> None:
    """The child ends between the parent's serving and its parking: the parent takes
    the result instead of parking for ever."""

    @app.workflow("quick")
    async def quick(ctx: perdure.Context) -> int:
        await ctx.wait_for_signal("go")
        return 1

    @app.workflow("boss")
    async def boss(ctx: perdure.Context) -> list[Any]:
        ctx.state["notes"] = []
        child = await ctx.start_child("quick", key="quick-child")
        return [await child.result(), list(ctx.state["notes"])]

    @app.update_handler("boss")
    async def note(ctx: perdure.Context, text: str) -> str:
        await ctx.step("go", lambda: app.signal("quick-child", "go"))
        ctx.state["notes"].append(text)
        return text

    with BackgroundWorker(app, concurrency=4):
        handle = app.start("boss")
        wait_until(lambda: handle.status() == "waiting", what="the parent's wait")
        assert app.update(handle.id, "note", "n", timeout=30) == "n"
        assert handle.result(timeout=30) == [1, ["n"]]
