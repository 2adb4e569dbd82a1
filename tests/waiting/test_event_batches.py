"""Batches of emitted events that start one run: ``EventTrigger(batch_size=, batch_window=)``."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.testing import drain

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def _define(app: perdure.App, size: int = 3, window: float | timedelta = 3600) -> None:
    @app.workflow(
        "settle",
        on_event=perdure.EventTrigger(
            "order.paid", {"status": "ok"}, batch_size=size, batch_window=window
        ),
    )
    async def settle(ctx: perdure.Context, events: list[dict[str, Any]]) -> list[int]:
        return [e["payload"]["order_id"] for e in events]


def _batch_runs(app: perdure.App) -> list[perdure.Run]:
    return sorted(app.list_runs(workflow="settle"), key=lambda r: r.created_at)


def test_a_batch_that_reaches_its_size_starts_one_run_with_its_events(app: perdure.App) -> None:
    _define(app, size=3)
    app.register()
    ids = [app.emit("order.paid", {"order_id": n, "status": "ok"}) for n in range(1, 5)]
    app.emit("order.paid", {"order_id": 99, "status": "refused"})  # no match: in no batch
    first, second = _batch_runs(app)
    assert first.key == f"event-batch:{ids[0]}:settle"
    assert second.key == f"event-batch:{ids[3]}:settle"
    drain(app)
    # The first batch was full: it ran at once. The second waits for its window.
    assert app.handle(first.id).result(timeout=10) == [1, 2, 3]
    assert app.handle(second.id).status() == "queued"
    events = app.handle(first.id).get().input
    assert [e["id"] for e in events] == ids[:3]
    assert events[0]["name"] == "order.paid" and events[0]["payload"]["status"] == "ok"
    listed = {e["event"].id: e["started"] for e in app.emitted_events()}
    assert [listed[i] for i in ids] == [[first.id]] * 3 + [[second.id]]


def test_a_window_that_ends_with_fewer_events_starts_one_run(app: perdure.App) -> None:
    _define(app, size=100, window=timedelta(seconds=2))
    app.register()
    ids = [app.emit("order.paid", {"order_id": n, "status": "ok"}) for n in (7, 8)]
    (batch,) = _batch_runs(app)
    assert batch.status == "queued"
    # Nothing more is emitted: the window's end alone starts the run.
    with BackgroundWorker(app, **FAST):
        assert app.handle(batch.id).result(timeout=20) == [7, 8]
    assert [e["id"] for e in app.handle(batch.id).get().input] == ids
    # The next event opens a new batch.
    later = app.emit("order.paid", {"order_id": 9, "status": "ok"})
    assert [r.key for r in _batch_runs(app)][-1] == f"event-batch:{later}:settle"


def test_a_rolled_back_emit_is_in_no_batch(app: perdure.App, pg_url: str) -> None:
    _define(app, size=2)
    app.register()
    kept = app.emit("order.paid", {"order_id": 1, "status": "ok"})
    with psycopg.connect(pg_url) as conn:
        app.emit("order.paid", {"order_id": 2, "status": "ok"}, conn=conn)
        conn.rollback()
    app.emit("order.paid", {"order_id": 3, "status": "ok"})
    (batch,) = _batch_runs(app)
    assert [e["payload"]["order_id"] for e in app.handle(batch.id).get().input] == [1, 3]
    assert app.handle(batch.id).get().input[0]["id"] == kept


def test_the_same_delivery_twice_joins_its_batch_once(app: perdure.App) -> None:
    _define(app, size=5)
    app.register()
    for _ in range(3):
        app.emit("order.paid", {"order_id": 1, "status": "ok"}, key="delivery-1")
    (batch,) = _batch_runs(app)
    assert len(app.handle(batch.id).get().input) == 1


def test_concurrent_emitters_put_each_event_in_exactly_one_batch(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _define(app, size=7, window=0.2)
    app.register()
    emitted: list[int] = []
    lock = threading.Lock()

    def emit(base: int) -> None:
        for n in range(base, base + 50):
            event_id = app.emit("order.paid", {"order_id": n, "status": "ok"})
            with lock:
                emitted.append(event_id)

    with BackgroundWorker(app, **FAST):
        threads = [threading.Thread(target=emit, args=(k * 1000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_until(
            lambda: all(r.status == "completed" for r in _batch_runs(app)), 30, what="batches"
        )
    batched = Counter(e["id"] for r in _batch_runs(app) for e in app.handle(r.id).get().input)
    assert sorted(batched) == sorted(emitted) and set(batched.values()) == {1}
    assert all(1 <= len(app.handle(r.id).get().input) <= 7 for r in _batch_runs(app))
    (delivered,) = db.execute(
        "SELECT count(*) FROM event_deliveries WHERE position IS NULL"
    ).fetchone()  # type: ignore[misc]
    assert delivered == 200


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (perdure.EventTrigger("a", batch_size=10), "needs both batch_size and batch_window"),
        (perdure.EventTrigger("a", batch_window=5), "needs both batch_size and batch_window"),
        (perdure.EventTrigger("a", batch_size=0, batch_window=5), "batch_size must be"),
        (perdure.EventTrigger("a", batch_size=10_001, batch_window=5), "batch_size must be"),
        (perdure.EventTrigger("a", batch_size=True, batch_window=5), "batch_size must be"),  # type: ignore[arg-type]
        (perdure.EventTrigger("a", batch_size="10", batch_window=5), "batch_size must be"),  # type: ignore[arg-type]
        (perdure.EventTrigger("a", batch_size=10, batch_window=0), "batch_window must be"),
        (perdure.EventTrigger("a", batch_size=10, batch_window=-1), "batch_window must be"),
        (perdure.EventTrigger("a", batch_size=10, batch_window="5s"), "batch_window must be"),  # type: ignore[arg-type]
        (perdure.EventTrigger("a", batch_size=10, batch_window=timedelta(days=2)), "a day"),
        (
            [perdure.EventTrigger("a", batch_size=10, batch_window=5), "b"],
            "must all batch alike",
        ),
        (
            [
                perdure.EventTrigger("a", batch_size=10, batch_window=5),
                perdure.EventTrigger("b", batch_size=10, batch_window=6),
            ],
            "must all batch alike",
        ),
    ],
)
def test_bad_batch_arguments_are_refused_at_definition(
    app: perdure.App, trigger: Any, message: str
) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):

        @app.workflow("bad", on_event=trigger)
        async def bad(ctx: perdure.Context, events: list[Any]) -> None:
            return None

    assert "bad" not in {name for name, _ in app.registry.all()}
