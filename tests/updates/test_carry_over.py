"""Updates carry over at continue-as-new: a request the run has not decided moves to
its successor, and the caller gets the reply from there."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until


def _entity(app: perdure.App, gate: threading.Event) -> None:
    """``entity``: generation 0 works (a step blocked on ``gate``) and continues as
    new; generation 1 waits for ``stop``. Update ``ask`` answers the generation."""

    @app.workflow("entity")
    async def entity(ctx: perdure.Context, generation: int) -> int:
        ctx.state["generation"] = generation
        if generation == 0:
            await ctx.step("work", lambda: gate.wait(60))
            await ctx.continue_as_new(1)
        await ctx.wait_for_signal("stop")
        return generation

    @app.update_handler("entity")
    async def ask(ctx: perdure.Context, question: str) -> dict[str, Any]:
        await ctx.step("answer", lambda: question)
        return {"generation": ctx.state["generation"], "question": question}


def test_a_request_pending_at_continue_as_new_is_answered_by_the_successor(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    gate = threading.Event()
    _entity(app, gate)
    with BackgroundWorker(app, concurrency=4), ThreadPoolExecutor(max_workers=1) as pool:
        first = app.start("entity", 0, key="device-1")
        wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM steps WHERE run_id = %s AND name = 'work'", (first.id,)
                ).fetchone()
                != (0,)
                or first.status() == "running"
            ),
            what="the run to be busy in its step",
        )
        # Sent while the run works between waits: it is not served before it continues.
        reply = pool.submit(
            app.update, first.id, "ask", "still there?", update_id="q-1", timeout=60
        )
        wait_until(lambda: app.updates(first.id) != [], what="the request")
        gate.set()
        assert reply.result(timeout=60) == {"generation": 1, "question": "still there?"}
        successor = app.get_run("device-1")
        assert successor.id != first.id
        # The request moved: the successor holds it, answered, the old run none.
        assert app.updates(first.id) == []
        (moved,) = app.updates(successor.id)
        assert (moved["update_id"], moved["status"]) == ("q-1", "completed")
        # The same id through the old run's id or the key finds the same reply.
        again = app.update(first.id, "ask", "still there?", update_id="q-1", timeout=30)
        assert again == app.update("device-1", "ask", "still there?", update_id="q-1", timeout=30)
        assert again == {"generation": 1, "question": "still there?"}
        # A new request to the old run's id goes to the successor.
        assert app.update(first.id, "ask", "later", timeout=30)["generation"] == 1
        app.signal("device-1", "stop")
        assert first.result(timeout=30) == 1
    assert [u["update_id"] for u in app.updates(successor.id)][:1] == ["q-1"]
    assert len(app.updates(successor.id)) == 2


def test_an_update_to_a_finished_chain_is_refused(app: perdure.App) -> None:
    gate = threading.Event()
    gate.set()
    _entity(app, gate)
    with BackgroundWorker(app, concurrency=4):
        first = app.start("entity", 0, key="device-2")
        wait_until(
            lambda: (
                app.get_run("device-2").id != first.id
                and app.get_run("device-2").status == "waiting"
            ),
            what="the successor's wait",
        )
        app.signal("device-2", "stop")
        assert first.result(timeout=30) == 1
    with pytest.raises(perdure.InvalidRunState, match="completed"):
        app.update(first.id, "ask", "anyone?", timeout=5)
