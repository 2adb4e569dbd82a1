"""Many events at once (app.emit_many) and app.emit's wake-up after its commit, on real PostgreSQL.

emit_many records its events as app.emit records one, in one transaction:
the same waits woken once, the same triggers and batches, keys once, all or
none. app.emit notifies the workers after its commit; an emitter that dies
before notifying leaves its runs to the workers' fallback poll.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker
from perdure.testing import drain

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}


def _waiting_for_orders(app: perdure.App, orders: range) -> list[perdure.RunHandle]:
    @app.workflow("await_order")
    async def await_order(ctx: perdure.Context, order: int) -> int:
        event = await ctx.wait_for_event("order.paid", {"order_id": order}, timeout=600)
        return event.id

    handles = [app.start("await_order", n) for n in orders]
    drain(app)
    assert {h.status() for h in handles} == {"waiting"}
    return handles


def _deliveries(db: Any) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT event_id, run_id::text FROM event_deliveries ORDER BY event_id, run_id"
    ).fetchall()


def test_a_bulk_emit_wakes_every_matching_wait_once(app: perdure.App, db: Any) -> None:
    handles = _waiting_for_orders(app, range(30))
    # Each event matches one run; the second event for order 3 finds its wait taken.
    events = [perdure.EventToEmit("order.paid", {"order_id": n, "amount": n}) for n in range(30)]
    events.append(perdure.EventToEmit("order.paid", {"order_id": 3, "amount": 99}))
    ids = app.emit_many(events)
    assert len(ids) == 31 and len(set(ids)) == 31 and ids == sorted(ids)
    drain(app)
    assert [h.result(timeout=5) for h in handles] == ids[:30]
    delivered = _deliveries(db)
    assert len(delivered) == 30
    assert len({run for _, run in delivered}) == 30
    assert ids[30] not in {event for event, _ in delivered}
    (consumed,) = db.execute(
        "SELECT count(*) FROM history WHERE event = 'event_consumed'"
    ).fetchone()
    assert consumed == 30


def test_duplicate_keys_are_recorded_once_within_a_call_and_across_calls(
    app: perdure.App, db: Any
) -> None:
    (handle,) = _waiting_for_orders(app, range(1))
    first = app.emit("order.paid", {"order_id": 0}, key="pay-0")
    recorded = app.emit_many_recorded(
        [
            ("order.paid", {"order_id": 0}, "pay-0"),  # emitted before
            ("order.paid", {"order_id": 1}, "pay-1"),
            ("order.paid", {"order_id": 1}, "pay-1"),  # twice in the call
            ("order.refunded", {"order_id": 1}, "pay-1"),  # another name: its own event
        ]
    )
    assert recorded[0] == (first, False)
    assert recorded[1][1] is True and recorded[2] == (recorded[1][0], False)
    assert recorded[3][1] is True and recorded[3][0] != recorded[1][0]
    (count,) = db.execute("SELECT count(*) FROM emitted_events").fetchone()
    assert count == 3
    drain(app)
    assert handle.result(timeout=5) == first
    assert len(_deliveries(db)) == 1


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (("bad name!", {}), perdure.WorkflowDefinitionError, "event 2 of emit_many"),
        (("order.paid", {"x": {1, 2}}), perdure.SerializationError, "event 2"),
        (("order.paid", {}, ""), perdure.ConfigurationError, "event 2 of emit_many"),
        (("order.paid", {}, "k" * 600), perdure.ConfigurationError, "event 2 of emit_many"),
        ("order.paid", perdure.ConfigurationError, "event 2 of emit_many"),
    ],
)
def test_a_bad_event_anywhere_writes_nothing(
    app: perdure.App, db: Any, bad: Any, error: type[Exception], words: str
) -> None:
    (handle,) = _waiting_for_orders(app, range(1))
    events = [("order.paid", {"order_id": 0}, "a"), ("order.paid", {"order_id": 5}), bad]
    with pytest.raises(error, match=words):
        app.emit_many(events)
    assert db.execute("SELECT count(*) FROM emitted_events").fetchone() == (0,)
    assert handle.status() == "waiting"


def test_a_payload_over_the_limit_is_refused_naming_its_index(make_app: Any, db: Any) -> None:
    app = make_app(max_payload_bytes=1024)
    app.ensure_schema()
    with pytest.raises(perdure.SerializationError, match="event 1"):
        app.emit_many([("a", {}), ("b", {"blob": "x" * 2000})])
    assert db.execute("SELECT count(*) FROM emitted_events").fetchone() == (0,)


def test_too_many_events_in_one_call_are_refused(app: perdure.App, db: Any) -> None:
    with pytest.raises(perdure.ConfigurationError, match="at most 10000"):
        app.emit_many([("tick", {})] * 10_001)
    assert app.emit_many([]) == []
    assert db.execute("SELECT count(*) FROM emitted_events").fetchone() == (0,)


def test_a_bulk_emit_starts_triggered_workflows_and_fills_batches_as_single_emits_do(
    app: perdure.App, db: Any
) -> None:
    @app.workflow("ship", on_event=perdure.EventTrigger("order.paid", {"amount": 12}))
    async def ship(ctx: perdure.Context, order: dict[str, Any]) -> int:
        return int(order["order_id"])

    @app.workflow(
        "settle",
        on_event=perdure.EventTrigger(
            "payment.settled", batch_size=2, batch_window=timedelta(hours=1)
        ),
    )
    async def settle(ctx: perdure.Context, events: list[dict[str, Any]]) -> int:
        return len(events)

    app.register()

    def started() -> tuple[list[int], list[list[int]]]:
        """The events that started ship, and the events of each settle batch, oldest first."""
        rows = db.execute("SELECT workflow, input FROM runs ORDER BY created_at, key").fetchall()
        ships = [int(value["order_id"]) for workflow, value in rows if workflow == "ship"]
        batches = [[e["payload"]["n"] for e in value] for w, value in rows if w == "settle"]
        return ships, batches

    for n in (1, 2):
        app.emit("order.paid", {"order_id": n, "amount": 12})
    for n in range(5):
        app.emit("payment.settled", {"n": n})
    assert started() == ([1, 2], [[0, 1], [2, 3], [4]])
    # The bulk emit goes on as five more single emits would: the open batch
    # takes its first settlement, and order 5 (amount 1) starts nothing.
    app.emit_many(
        [("order.paid", {"order_id": n, "amount": 12}) for n in (3, 4)]
        + [("order.paid", {"order_id": 5, "amount": 1})]
        + [("payment.settled", {"n": n}) for n in range(5, 10)]
    )
    assert started() == ([1, 2, 3, 4], [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])
    # A keyed event, given twice in a call and again in another, starts one run.
    keyed = [("order.paid", {"order_id": 9, "amount": 12}, "k9")] * 2
    assert len(set(app.emit_many(keyed) + app.emit_many(keyed))) == 1
    (ships,) = db.execute("SELECT count(*) FROM runs WHERE workflow = 'ship'").fetchone()
    assert ships == 5
    assert started()[0] == [1, 2, 3, 4, 9]


def test_a_bulk_emit_in_the_callers_transaction_exists_only_if_it_commits(
    app: perdure.App, pg_url: str, db: Any
) -> None:
    first, second = _waiting_for_orders(app, range(2))
    with psycopg.connect(pg_url) as conn:
        app.emit_many([("order.paid", {"order_id": 0}), ("order.paid", {"order_id": 1})], conn=conn)
        conn.rollback()
    assert db.execute("SELECT count(*) FROM emitted_events").fetchone() == (0,)
    assert first.status() == second.status() == "waiting"
    with psycopg.connect(pg_url) as conn:
        ids = app.emit_many([("order.paid", {"order_id": 0})], conn=conn)
    drain(app)
    assert first.result(timeout=5) == ids[0]
    assert second.status() == "waiting"


def test_concurrent_bulk_emitters_with_overlapping_keys_record_each_event_once(
    app: perdure.App, db: Any
) -> None:
    handles = _waiting_for_orders(app, range(200))
    keys = [f"pay-{n}" for n in range(200)]
    batches = [
        keys[:150],
        list(reversed(keys[50:])),
        keys[100:] + keys[:100],
        list(reversed(keys)),
    ]
    answers: list[dict[str, int]] = [{} for _ in batches]
    errors: list[BaseException] = []

    def emitter(k: int) -> None:
        try:
            for start in range(0, len(batches[k]), 50):
                chunk = batches[k][start : start + 50]
                ids = app.emit_many(
                    [("order.paid", {"order_id": int(key[4:])}, key) for key in chunk]
                )
                answers[k].update(zip(chunk, ids, strict=True))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=emitter, args=(k,)) for k in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    # Every emitter was answered the one id of each key.
    merged: dict[str, int] = {}
    for answer in answers:
        for key, event_id in answer.items():
            assert merged.setdefault(key, event_id) == event_id
    assert len(merged) == 200
    assert db.execute("SELECT count(*), count(DISTINCT key) FROM emitted_events").fetchone() == (
        200,
        200,
    )
    delivered = _deliveries(db)
    assert len(delivered) == 200
    assert len({e for e, _ in delivered}) == len({r for _, r in delivered}) == 200
    drain(app)
    assert sorted(h.result(timeout=5) for h in handles) == sorted(merged.values())


def test_the_sql_function_wakes_runs_as_app_emit_many_does(
    app: perdure.App, db: Any, schema: str
) -> None:
    handles = _waiting_for_orders(app, range(3))
    (ids,) = db.execute(
        "SELECT emit_events(%s::jsonb)",
        (
            '[{"name": "order.paid", "payload": {"order_id": 0}, "key": "a"},'
            ' {"name": "order.paid", "payload": {"order_id": 1}},'
            ' {"name": "order.paid", "payload": {"order_id": 2}, "key": "a"}]',
        ),
    ).fetchone()
    # The third has the first's key: its id is the first's; run 2 is not woken.
    assert ids[0] == ids[2] and len(set(ids)) == 2
    drain(app)
    assert [h.result(timeout=5) for h in handles[:2]] == ids[:2]
    assert handles[2].status() == "waiting"


def _listen(pg_url: str, channel: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    return conn


def _notifications(conn: psycopg.Connection[Any], seconds: float) -> list[str]:
    """The payloads ``conn`` received within ``seconds``."""
    found: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([conn.fileno()], [], [], left)
        found += [n.payload for n in conn.notifies(timeout=0, stop_after=100)]
    return found


def test_app_emit_notifies_after_its_commit_and_the_sql_function_in_it(
    app: perdure.App, pg_url: str, schema: str, db: Any
) -> None:
    _waiting_for_orders(app, range(2))
    listener = _listen(pg_url, f"{schema}_wakeup")
    try:
        app.emit("order.paid", {"order_id": 0})
        assert "await_order" in _notifications(listener, 1.0)
        db.execute("SELECT emit_event('order.paid', '{\"order_id\": 1}')")
        assert "await_order" in _notifications(listener, 1.0)
        # An emit that wakes nothing notifies nothing.
        app.emit("order.paid", {"order_id": 77})
        assert _notifications(listener, 0.5) == []
        # No value a session leaves in the setting breaks or silences a write:
        # the trigger notifies as before.
        handle = app.start("await_order", 2)
        drain(app)
        _notifications(listener, 0.3)
        db.execute("SELECT set_config('perdure.deferred_wakeups', '[\"garbage', false)")
        db.execute("SELECT emit_event('order.paid', '{\"order_id\": 2}')")
        assert "await_order" in _notifications(listener, 1.0)
        drain(app)
        assert handle.status() == "completed"
    finally:
        listener.close()


def test_an_emitter_killed_between_its_commit_and_its_notification_still_wakes_the_run(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    (handle,) = _waiting_for_orders(app, range(1))
    listener = _listen(pg_url, f"{schema}_wakeup")
    # The emitter's process commits its event, then is killed (SIGKILL) when it is
    # about to notify: the notification never happens.
    script = textwrap.dedent(
        f"""
        import os, signal
        import perdure
        from perdure.store.statements.emissions import EmissionStatements

        def die(self, queues):
            os.kill(os.getpid(), signal.SIGKILL)

        EmissionStatements.wake = die
        app = perdure.App({pg_url!r}, schema={schema!r})
        app.emit("order.paid", {{"order_id": 0}}, key="killed")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        # An idle worker, its listener connected: it learns of work by notification,
        # else at its fallback poll (idle_poll_seconds).
        with BackgroundWorker(app, idle_poll_seconds=2.0, **FAST) as worker:
            deadline = time.monotonic() + 30
            while worker.count("worker_idle") < 2:
                assert time.monotonic() < deadline, "the worker never went idle"
                time.sleep(0.02)
            done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
            killed = time.monotonic()
            assert done.returncode == -signal.SIGKILL
            (event,) = app.emitted_events("order.paid")
            assert event["event"].key == "killed" and event["woke"] == [handle.id]
            # No notification came; the worker finds the due run at its poll.
            assert _notifications(listener, 0.2) == []
            assert handle.result(timeout=30) == event["event"].id
            assert time.monotonic() - killed < 2.0 + 10  # the poll, and a loaded machine
        assert _notifications(listener, 0.1) == []
    finally:
        listener.close()


def test_a_bulk_emit_finds_each_wait_by_its_anchor_and_gives_it_the_first_match(
    app: perdure.App, db: Any
) -> None:
    # Matches filed under a nested leaf, a number written otherwise, and no
    # leaf at all: each is found through its anchor, and each wait takes the
    # first event of the call that matches it.
    @app.workflow("await_shape")
    async def await_shape(ctx: perdure.Context, match: dict[str, Any]) -> int:
        event = await ctx.wait_for_event("shape", match, timeout=600)
        return event.id

    nested = app.start("await_shape", {"order": {"id": 7}})
    number = app.start("await_shape", {"amount": 2.0})
    anything = app.start("await_shape", {})
    other = app.start("await_shape", {"order": {"id": 8}})
    drain(app)
    events = [
        {"name": "shape", "payload": {"order": {"id": 7}, "amount": 2}},
        {"name": "shape", "payload": {"order": {"id": 7}}},
        {"name": "shape", "payload": {"order": {"id": 8, "x": [1]}}},
    ]
    rows = db.execute(
        "SELECT index, id, created, woke FROM emit_events(%s::jsonb, NULL, 1048576, 100)"
        " ORDER BY index",
        (json.dumps(events),),
    ).fetchall()
    ids = [row[1] for row in rows]
    # The first event takes the nested, the number and the empty match; the
    # second finds its wait taken; the third takes order 8's.
    assert [row[3] for row in rows] == [3, 0, 1]
    assert all(row[2] for row in rows)
    drain(app)
    assert [nested.result(timeout=5), number.result(timeout=5)] == [ids[0], ids[0]]
    assert anything.result(timeout=5) == ids[0]
    assert other.result(timeout=5) == ids[2]
    (consumed,) = db.execute(
        "SELECT count(*) FROM history WHERE event = 'event_consumed'"
    ).fetchone()
    assert consumed == 4


def test_a_bulk_emit_wins_a_race_with_its_first_matching_event(app: perdure.App, db: Any) -> None:
    @app.workflow("race_two")
    async def race_two(ctx: perdure.Context, order: int) -> list[Any]:
        first = await ctx.wait_first(
            paid=ctx.event("paid", match={"order": order}),
            cancelled=ctx.event("cancelled", match={"order": order}),
        )
        return [first.name, first.value.id]

    @app.workflow("wait_paid")
    async def wait_paid(ctx: perdure.Context, order: int) -> int:
        event = await ctx.wait_for_event("paid", {"order": order}, timeout=600)
        return event.id

    racer = app.start("race_two", 5)
    waiter = app.start("wait_paid", 5)
    drain(app)
    ids = app.emit_many(
        [("cancelled", {"order": 5}), ("paid", {"order": 5}), ("cancelled", {"order": 5})]
    )
    drain(app)
    # The race goes to the call's first matching event; the plain wait takes
    # the paid event; the second cancellation is taken by nothing.
    assert racer.result(timeout=5) == ["cancelled", ids[0]]
    assert waiter.result(timeout=5) == ids[1]
    assert ids[2] not in {event for event, _ in _deliveries(db)}
