"""Updates: validated before anything is recorded, applied once in order, replied once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until


def _cart_app(app: perdure.App) -> list[str]:
    """Define ``cart`` with updates ``add_item`` (validated) and ``boom`` on ``app``;
    the list the steps append to."""
    done: list[str] = []
    lock = threading.Lock()

    def remember(item: str) -> str:
        with lock:
            done.append(item)
        return item

    @app.workflow("cart")
    async def cart(ctx: perdure.Context, user: str) -> list[str]:
        ctx.state["items"] = []
        await ctx.wait_for_signal("checkout")
        return list(ctx.state["items"])

    @app.update_handler("cart")
    async def add_item(ctx: perdure.Context, item: str) -> dict[str, Any]:
        await ctx.step("remember", remember, item)
        ctx.state["items"].append(item)
        return {"count": len(ctx.state["items"]), "item": item}

    @add_item.validator
    def _check(item: Any) -> None:
        if not isinstance(item, str) or not item:
            raise ValueError("an item is a non-empty string")

    @app.update_handler("cart", "boom")
    async def boom(ctx: perdure.Context) -> None:
        raise RuntimeError("the handler broke")

    return done


def _trace(db: psycopg.Connection[Any], run_id: str) -> tuple[list[Any], list[Any]]:
    """The run's history events and its steps: everything but the bookkeeping of
    the wake-up itself (the claim and the park that follows it)."""
    history = db.execute(
        "SELECT id, event, step_position, detail FROM history WHERE run_id = %s"
        " AND event NOT IN ('run_claimed', 'run_waiting') ORDER BY id",
        (run_id,),
    ).fetchall()
    steps = db.execute(
        "SELECT position, name, status, output FROM steps WHERE run_id = %s ORDER BY position",
        (run_id,),
    ).fetchall()
    return history, steps


def test_an_update_is_applied_in_the_run_and_its_reply_returned(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "ada", key="cart:ada")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        assert app.update("cart:ada", "add_item", "apple", timeout=30) == {
            "count": 1,
            "item": "apple",
        }
        assert app.update(handle.id, "add_item", "pear", timeout=30)["count"] == 2
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["apple", "pear"]
    assert done == ["apple", "pear"]
    events = [e.event for e in app.history(handle.id)]
    assert events.count("update_accepted") == 2 and events.count("update_completed") == 2
    listed = app.updates(handle.id)
    # Both applied at the wait (position 0), in the order they were sent.
    assert [(u["name"], u["status"], u["anchor_position"], u["seq"]) for u in listed] == [
        ("add_item", "completed", 0, 0),
        ("add_item", "completed", 0, 1),
    ]


def test_a_validator_refusal_writes_nothing_in_the_run(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "bob")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        before = _trace(db, handle.id)
        with pytest.raises(perdure.UpdateRejected, match="non-empty string"):
            app.update(handle.id, "add_item", "", timeout=30)
        with pytest.raises(perdure.UpdateRejected, match="non-empty string"):
            app.update(handle.id, "add_item", 42, timeout=30)
        assert _trace(db, handle.id) == before
        wait_until(lambda: handle.status() == "waiting", what="the run to wait again")
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == []
    assert done == []
    assert [u["status"] for u in app.updates(handle.id)] == ["rejected", "rejected"]


def test_the_same_update_id_twice_is_applied_once_with_one_reply(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "cy")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        first = app.update(handle.id, "add_item", "fig", update_id="u-1", timeout=30)
        again = app.update(handle.id, "add_item", "fig", update_id="u-1", timeout=30)
        assert first == again == {"count": 1, "item": "fig"}
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["fig"]
    assert done == ["fig"]
    with pytest.raises(perdure.ConfigurationError, match="is update 'add_item'"):
        app.update(handle.id, "boom", update_id="u-1", timeout=5)


def test_a_failing_handler_is_a_typed_reply_and_the_run_goes_on(app: perdure.App) -> None:
    _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "dee")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        with pytest.raises(perdure.UpdateFailed, match="the handler broke"):
            app.update(handle.id, "boom", timeout=30)
        assert app.update(handle.id, "add_item", "kiwi", timeout=30)["count"] == 1
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["kiwi"]


def test_bad_requests_are_refused_with_typed_errors(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _cart_app(app)
    handle = app.start("cart", "eve")
    with pytest.raises(perdure.RunNotFound):
        app.update("no-such-run", "add_item", "x")
    with pytest.raises(perdure.WorkflowDefinitionError):
        app.update(handle.id, "bad name!", "x")
    with pytest.raises(perdure.UpdateRejected, match="no update handler 'nope'"):
        app.update(handle.id, "nope", "x")
    with pytest.raises(perdure.SerializationError):
        app.update(handle.id, "add_item", object())
    with pytest.raises(perdure.ConfigurationError):
        app.update(handle.id, "add_item", "x", timeout=-1)
    with pytest.raises(perdure.UpdateTimeout):
        app.update(handle.id, "add_item", "x", update_id="late", timeout=0.2)
    assert [u["update_id"] for u in app.updates(handle.id)] == ["late"]
    app.cancel(handle.id)
    with pytest.raises(perdure.InvalidRunState):
        app.update(handle.id, "add_item", "x", update_id="late", timeout=5)
    with pytest.raises(perdure.InvalidRunState):
        app.update(handle.id, "add_item", "y", timeout=5)
    assert [u["update_id"] for u in app.updates(handle.id)] == ["late"]


def test_update_with_start_starts_the_run_by_key_once(app: perdure.App) -> None:
    _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        first = app.update_with_start(
            "cart", key="cart:fay", input="fay", update="add_item", payload="a", timeout=30
        )
        second = app.update_with_start(
            "cart", key="cart:fay", input="fay", update="add_item", payload="b", timeout=30
        )
        assert (first["count"], second["count"]) == (1, 2)
        assert len(app.list_runs(workflow="cart")) == 1
        app.signal("cart:fay", "checkout")
        assert app.get_run("cart:fay").status in ("running", "waiting", "queued", "completed")


def test_a_hundred_concurrent_updates_are_each_applied_once_in_request_order(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "gus")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        items = [f"item-{i}" for i in range(100)]
        with ThreadPoolExecutor(max_workers=20) as pool:
            replies = list(
                pool.map(lambda i: app.update(handle.id, "add_item", i, timeout=120), items)
            )
        app.signal(handle.id, "checkout")
        result = handle.result(timeout=60)
    assert sorted(result) == sorted(items) and len(done) == 100 and sorted(done) == sorted(items)
    # The stated order: the order the requests were written (the updates' ids).
    by_request = [u["payload"] for u in app.updates(handle.id)]
    assert result == by_request == done
    assert sorted(r["count"] for r in replies) == list(range(1, 101))
    for reply in replies:
        assert result[reply["count"] - 1] == reply["item"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"update_id": "u\x00"}, perdure.ConfigurationError, "NUL"),
        ({"update_id": "u" * 201}, perdure.ConfigurationError, "200"),
        ({"update_id": ""}, perdure.ConfigurationError, "empty"),
        ({"update_id": 7}, perdure.ConfigurationError, "update id"),
        ({"timeout": "soon"}, perdure.ConfigurationError, "update timeout"),
    ],
)
def test_bad_update_ids_and_timeouts_are_refused_before_anything_is_written(
    app: perdure.App, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    _cart_app(app)
    handle = app.start("cart", "ida")
    with pytest.raises(error, match=message):
        app.update(handle.id, "add_item", "x", **kwargs)
    assert app.updates(handle.id) == []


def test_bad_handler_declarations_are_refused(app: perdure.App) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError, match="async def"):

        @app.update_handler("cart")
        def plain(ctx: perdure.Context, item: str) -> None: ...

    with pytest.raises(perdure.WorkflowDefinitionError, match=r"\(ctx\) or \(ctx, payload\)"):

        @app.update_handler("cart")
        async def three(ctx: perdure.Context, a: int, b: int) -> None: ...

    with pytest.raises(perdure.WorkflowDefinitionError, match="invalid update name"):
        app.update_handler("cart", "no spaces")(three_ok)
    with pytest.raises(perdure.WorkflowDefinitionError, match="invalid workflow name"):
        app.update_handler("bad workflow")(three_ok)
    handler = app.update_handler("cart", "twice")(three_ok)
    with pytest.raises(perdure.WorkflowDefinitionError, match="defined twice"):
        app.update_handler("cart", "twice")(other_ok)
    with pytest.raises(perdure.WorkflowDefinitionError, match="plain def"):

        @handler.validator
        async def checks(payload: Any) -> None: ...


async def three_ok(ctx: perdure.Context, payload: Any) -> None:
    """A well-formed handler."""


async def other_ok(ctx: perdure.Context) -> None:
    """Another well-formed handler."""


def test_a_sleeping_run_serves_updates_and_still_wakes_at_its_time(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("timer")
    async def timer(ctx: perdure.Context) -> list[int]:
        ctx.state["seen"] = []
        await ctx.sleep(2)
        return list(ctx.state["seen"])

    @app.update_handler("timer")
    async def see(ctx: perdure.Context, n: int) -> int:
        await ctx.step("see", lambda: n)
        ctx.state["seen"].append(n)
        return len(ctx.state["seen"])

    with BackgroundWorker(app, concurrency=4):
        handle = app.start("timer")
        wait_until(lambda: handle.status() == "waiting", what="the sleep")
        wake_at = handle.get().waiting_for["until"]  # type: ignore[index]
        assert app.update(handle.id, "see", 1, timeout=30) == 1
        assert app.update(handle.id, "see", 2, timeout=30) == 2
        # Served without moving the sleep's wake time.
        waiting = wait_until(lambda: handle.get().waiting_for, what="the sleep again")
        assert waiting["until"] == wake_at
        assert handle.result(timeout=30) == [1, 2]
    sleep = next(s for s in app.steps(handle.id) if s.kind == "sleep")
    assert sleep.completed_at is not None and sleep.wake_at is not None
    assert sleep.completed_at >= sleep.wake_at


@pytest.mark.parametrize("encrypted", [True, False])
def test_an_updates_payload_and_reply_go_through_the_codec(
    make_app: Any, db: psycopg.Connection[Any], encrypted: bool
) -> None:
    """With encryption on, the updates table holds envelopes, never the payload or
    the reply in clear; with it off, both are there (the check can fail)."""
    from perdure.store.encryption import AesGcm, generate_key_line

    marker = "zq-update-marker-51c"
    app = make_app(codec=AesGcm.from_text(generate_key_line("k1"))) if encrypted else make_app()
    _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "ada")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        reply = app.update(handle.id, "add_item", marker, update_id="u-enc", timeout=30)
        assert reply == {"count": 1, "item": marker}
        # The reply reads back in clear through the App, again with the same id.
        assert app.update(handle.id, "add_item", marker, update_id="u-enc", timeout=30) == reply
        listed = app.updates(handle.id)
        assert [(u["payload"], u["result"]) for u in listed] == [(marker, reply)]
    stored = db.execute(
        "SELECT payload::text, result::text FROM updates WHERE run_id = %s", (handle.id,)
    ).fetchall()
    assert len(stored) == 1
    for column in stored[0]:
        if encrypted:
            assert marker not in column and "aes256gcm" in column, column
        else:
            assert marker in column, column


def test_check_replay_applies_a_runs_recorded_updates_at_their_waits(app: perdure.App) -> None:
    """A run that took updates replays cleanly in check-replay (from the database and
    from an export); the same history without its updates would not (the check can fail)."""
    import json

    from perdure import testing

    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "ada")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        app.update(handle.id, "add_item", "apple", timeout=30)
        app.update(handle.id, "add_item", "pear", timeout=30)
        wait_until(lambda: handle.status() == "waiting", what="the wait again")
    assert done == ["apple", "pear"]

    reports = testing.check_replay(app)
    assert [(r.run_id, r.ok) for r in reports] == [(handle.id, True)], [
        r.describe() for r in reports
    ]
    assert reports[0].replayed == 3  # the wait and the two handlers' steps
    assert done == ["apple", "pear"]  # no step function ran again

    exported = json.loads(json.dumps(testing.export_runs(app)))
    assert [u["update_id"] for u in exported[0]["updates"]] != []
    assert all(r.ok for r in testing.check_replay(app, exported))
    stripped = [dict(run, updates=[]) for run in exported]
    [report] = testing.check_replay(app, stripped)
    assert not report.ok and report.recorded == "remember", report.describe()


def test_the_reply_wakes_the_caller_through_notify_not_its_fallback_look(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the fallback look pushed to a minute, replies still come in seconds:
    the reply's NOTIFY wakes the caller (and a pending one still times out)."""
    import time

    from perdure.api import notices, updating

    monkeypatch.setattr(updating, "MAX_POLL_SECONDS", 60.0)
    monkeypatch.setattr(notices, "FALLBACK_SECONDS", 60.0)
    _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "ada")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        for item in ("apple", "pear", "fig"):
            began = time.monotonic()
            assert app.update(handle.id, "add_item", item, timeout=30)["item"] == item
            assert time.monotonic() - began < 10
        began = time.monotonic()
        with pytest.raises(perdure.UpdateRejected):
            app.update(handle.id, "add_item", "", timeout=30)
        assert time.monotonic() - began < 10
