"""Emitted events on a real PostgreSQL: app.emit, emit_event in SQL, ctx.wait_for_event.

An emitted event (app.emit) is not a run's published value (ctx.set_event):
these tests cover the former only.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker
from perdure.testing import drain

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def _wait_for_order(app: perdure.App) -> None:
    @app.workflow("await_payment")
    async def await_payment(ctx: perdure.Context, order: int) -> dict[str, Any]:
        event = await ctx.wait_for_event("order.paid", {"order_id": order}, timeout=600)
        return {"id": event.id, "key": event.key, "payload": event.payload}


def test_an_emit_wakes_the_matching_run_only_in_its_own_transaction(app: perdure.App) -> None:
    _wait_for_order(app)
    first = app.start("await_payment", 1)
    second = app.start("await_payment", 2)
    drain(app)
    assert first.status() == second.status() == "waiting"
    assert first.get().waiting_for is not None
    assert first.get().waiting_for["event"] == "order.paid"
    assert first.get().waiting_for["match"] == {"order_id": 1}

    event_id = app.emit("order.paid", {"order_id": 2, "amount": 30}, key="pay-2")
    # No worker ran: the emitter completed the wait of run 2 alone.
    (wait,) = app.steps(second.id)
    assert (wait.name, wait.kind, wait.status) == ("event:order.paid", "event_wait", "completed")
    assert wait.output["id"] == event_id
    (wait,) = app.steps(first.id)
    assert wait.status == "waiting"

    drain(app)
    assert second.result(timeout=5) == {
        "id": event_id,
        "key": "pay-2",
        "payload": {"order_id": 2, "amount": 30},
    }
    assert first.status() == "waiting"
    (listed, *_) = app.emitted_events()
    assert listed["event"].id == event_id and listed["woke"] == [second.id]
    assert listed["started"] == []


def test_the_same_key_records_and_wakes_once(app: perdure.App) -> None:
    @app.workflow("two_payments")
    async def two_payments(ctx: perdure.Context) -> list[int | None]:
        a = await ctx.wait_for_event("paid", timeout=600)
        try:
            b = await ctx.wait_for_event("paid", timeout=0.5)
        except perdure.EventWaitTimeout:
            return [a.id, None]
        return [a.id, b.id]

    handle = app.start("two_payments")
    drain(app)
    one = app.emit("paid", {"n": 1}, key="k")
    assert app.emit("paid", {"n": 1}, key="k") == one
    # Another name may use the same key.
    assert app.emit("refunded", {"n": 1}, key="k") != one
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == [one, None]
    assert len(app.emitted_events("paid")) == 1


def test_a_wait_with_lookback_takes_an_earlier_event_and_each_event_only_once(
    app: perdure.App,
) -> None:
    @app.workflow("late")
    async def late(ctx: perdure.Context) -> list[Any]:
        taken = []
        for _ in range(2):
            try:
                event = await ctx.wait_for_event(
                    "shipped", {"order": {"id": 7}}, lookback=3600, timeout=0.5
                )
                taken.append(event.payload["carrier"])
            except perdure.EventWaitTimeout:
                taken.append(None)
        return taken

    app.emit("shipped", {"order": {"id": 7, "total": 5}, "carrier": "dhl"})
    app.emit("shipped", {"order": {"id": 8}, "carrier": "ups"})
    handle = app.start("late")
    with BackgroundWorker(app, **FAST):
        # The first wait takes the earlier event; the second does not take it again.
        assert handle.result(timeout=20) == ["dhl", None]


def test_without_lookback_an_earlier_event_does_not_count(app: perdure.App) -> None:
    @app.workflow("strict")
    async def strict(ctx: perdure.Context) -> str:
        try:
            await ctx.wait_for_event("ping", timeout=0.3)
        except perdure.EventWaitTimeout:
            return "timed out"
        return "took it"

    app.emit("ping")
    handle = app.start("strict")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "timed out"
    (wait,) = app.steps(handle.id)
    assert (wait.kind, wait.status) == ("event_wait", "timed_out")
    timed_out = [e for e in app.history(handle.id) if e.event.endswith("timed_out")]
    assert [(e.event, e.step_name) for e in timed_out] == [("event_wait_timed_out", "event:ping")]


def test_an_emit_in_a_rolled_back_transaction_wakes_nothing(app: perdure.App, pg_url: str) -> None:
    _wait_for_order(app)
    handle = app.start("await_payment", 5)
    drain(app)
    with psycopg.connect(pg_url) as conn:
        app.emit("order.paid", {"order_id": 5}, key="outbox-1", conn=conn)
        conn.rollback()
    assert app.emitted_events() == []
    (wait,) = app.steps(handle.id)
    assert wait.status == "waiting"
    assert drain(app).get("completed", 0) == 0
    assert handle.status() == "waiting"

    with psycopg.connect(pg_url) as conn:
        app.emit("order.paid", {"order_id": 5}, key="outbox-1", conn=conn)
        (wait,) = app.steps(handle.id)
        assert wait.status == "waiting"  # not committed yet: nothing seen outside
        conn.commit()
    drain(app)
    assert handle.result(timeout=5)["key"] == "outbox-1"


def test_emit_async_in_the_callers_async_transaction(app: perdure.App, pg_url: str) -> None:
    _wait_for_order(app)
    handle = app.start("await_payment", 6)
    drain(app)

    async def main(commit: bool) -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await app.emit_async("order.paid", {"order_id": 6}, key=f"{commit}", conn=conn)
            await (conn.commit() if commit else conn.rollback())

    asyncio.run(main(False))
    assert app.emitted_events() == []
    asyncio.run(main(True))
    (event,) = app.emitted_events("order.paid")
    assert event["woke"] == [handle.id]


def test_emit_event_from_a_trigger_on_a_users_table(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    _wait_for_order(app)
    handle = app.start("await_payment", 9182)
    drain(app)
    table = f"{schema}_orders"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE public.{table} (id integer PRIMARY KEY, paid boolean)")
        conn.execute(
            f"""CREATE FUNCTION public.{table}_paid() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.paid AND NOT OLD.paid THEN
                    PERFORM {schema}.emit_event('order.paid',
                        jsonb_build_object('order_id', NEW.id), 'order-paid:' || NEW.id);
                END IF;
                RETURN NEW;
            END $$"""
        )
        conn.execute(
            f"CREATE TRIGGER paid AFTER UPDATE ON public.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION public.{table}_paid()"
        )
        try:
            conn.execute(f"INSERT INTO public.{table} VALUES (9182, false)")
            with conn.transaction():
                conn.execute(f"UPDATE public.{table} SET paid = true WHERE id = 9182")
            drain(app)
            assert handle.result(timeout=5)["key"] == "order-paid:9182"
        finally:
            conn.execute(f"DROP TABLE public.{table}")
            conn.execute(f"DROP FUNCTION public.{table}_paid()")


def test_waits_from_many_threads_race_with_emits_and_none_is_lost(app: perdure.App) -> None:
    @app.workflow("racer")
    async def racer(ctx: perdure.Context, n: int) -> int:
        # With a lookback an event emitted just before the wait counts: the
        # emits race the waits being parked, and none may be missed.
        event = await ctx.wait_for_event("go", {"n": n}, lookback=600, timeout=600)
        return int(event.payload["n"])

    handles = [app.start("racer", n) for n in range(20)]
    with BackgroundWorker(app, **FAST):
        for n in range(20):
            app.emit("go", {"n": n})
        assert [h.result(timeout=30) for h in handles] == list(range(20))


def test_the_emit_path_finds_waits_by_index(app: perdure.App, db: Any, schema: str) -> None:
    app.ensure_schema()
    # Many waits on other matches of the same name: the emit's lookup is an
    # index scan on (name, anchor), never a scan of the waits.
    db.execute(
        f"""INSERT INTO {schema}.runs (id, workflow, version, queue, status, input, created_at,
                                      updated_at)
            SELECT gen_random_uuid(), 'w', 1, 'w', 'waiting', 'null', now(), now()
            FROM generate_series(1, 2000)"""
    )
    db.execute(
        f"""INSERT INTO {schema}.event_waits (run_id, position, name, match, anchor, since)
            SELECT id, 0, 'order.paid', jsonb_build_object('order_id', n),
                   {schema}.event_anchor(jsonb_build_object('order_id', n)), now()
            FROM (SELECT id, row_number() OVER () AS n FROM {schema}.runs) r"""
    )
    db.execute(f"ANALYZE {schema}.event_waits")
    plan = "\n".join(
        row[0]
        for row in db.execute(
            f"""EXPLAIN SELECT w.run_id FROM {schema}.event_waits w
                WHERE w.name = 'order.paid'
                  AND w.anchor = ANY (array_append(
                      {schema}.event_anchors('{{"order_id": 7, "x": 1}}'), ''))
                  AND '{{"order_id": 7, "x": 1}}'::jsonb @> w.match"""
        ).fetchall()
    )
    assert "event_waits_anchor_idx" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize(
    ("match", "payload", "matches"),
    [
        ({"a": 1}, {"a": 1.0, "b": 2}, True),
        ({"a": {"b": "x"}}, {"a": {"b": "x", "c": 1}}, True),
        ({"a": {"b": "x"}}, {"a": {"b": "y"}}, False),
        ({"tags": ["x"]}, {"tags": ["y", "x"]}, True),
        ({}, {"anything": True}, True),
    ],
)
def test_anchors_never_miss_a_contained_match(
    app: perdure.App,
    db: Any,
    schema: str,
    match: dict[str, Any],
    payload: dict[str, Any],
    matches: bool,
) -> None:
    app.ensure_schema()
    row = db.execute(
        f"""SELECT %s::jsonb @> %s::jsonb,
                   {schema}.event_anchor(%s::jsonb) = ANY (
                       array_append({schema}.event_anchors(%s::jsonb), ''))""",
        (json.dumps(payload), json.dumps(match), json.dumps(match), json.dumps(payload)),
    ).fetchone()
    assert row[0] is matches
    if matches:
        assert row[1] is True


def test_bad_emits_are_refused_before_anything_is_written(app: perdure.App) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError):
        app.emit("bad name!", {})
    with pytest.raises(perdure.ConfigurationError):
        app.emit("ok", {}, key="")
    with pytest.raises(perdure.SerializationError):
        app.emit("ok", {"x": object()})
    assert app.emitted_events() == []


def test_a_bad_match_is_refused_when_the_wait_is_asked_for(app: perdure.App) -> None:
    @app.workflow("bad_match")
    async def bad_match(ctx: perdure.Context) -> str:
        try:
            await ctx.wait_for_event("x", ["not", "an", "object"])  # type: ignore[arg-type]
        except perdure.ConfigurationError as exc:
            return str(exc)
        return "accepted"

    handle = app.start("bad_match")
    drain(app)
    assert "must be a dict" in handle.result(timeout=5)
    assert app.steps(handle.id) == []


def test_retention_deletes_old_events_with_their_deliveries(
    make_app: Any, db: Any, schema: str
) -> None:
    past = make_app(clock=perdure.VirtualClock(datetime.now(UTC) - timedelta(days=40)))
    old = past.emit("old", {"n": 1})
    app = make_app()
    recent = app.emit("recent", {"n": 2})
    result = app.prune(timedelta(days=30), batch_size=1)
    assert result.events == 1
    assert [e["event"].id for e in app.emitted_events()] == [recent]
    assert old != recent


def test_a_replay_returns_the_event_the_wait_took_not_a_newer_one(app: perdure.App) -> None:
    tries = {"n": 0}

    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("try again")
        return "done"

    @app.workflow("replayed")
    async def replayed(ctx: perdure.Context) -> list[Any]:
        event = await ctx.wait_for_event("paid", {"order": 1}, lookback=3600, timeout=600)
        retry = perdure.RetryPolicy(max_attempts=2, initial_delay=1, jitter=0)
        await ctx.step("after", flaky, retry=retry)
        return [event.id, event.payload["try"]]

    first = app.emit("paid", {"order": 1, "try": 1})
    handle = app.start("replayed")
    drain(app)
    # The step after the wait failed once and is retried in a new claim of the
    # run, which replays the wait. A newer matching event is there now; the
    # replay still returns the first.
    assert tries["n"] == 1 and handle.status() != "completed"
    app.emit("paid", {"order": 1, "try": 2})
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == [first, 1]
    (recent, taken) = app.emitted_events("paid")
    assert taken["woke"] == [handle.id] and recent["woke"] == []
