"""``signal_many``: many signals in one statement, with the semantics of ``signal`` for each."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}


def _define(app: perdure.App) -> None:
    @app.workflow("collect")
    async def collect(ctx: perdure.Context, n: int) -> list[object]:
        return [await ctx.wait_for_signal("go") for _ in range(n)]


def _signals(db: psycopg.Connection[tuple[object, ...]]) -> int:
    row = db.execute("SELECT count(*) FROM signals").fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]


def test_signal_many_delivers_each_in_order_to_waiting_and_queued_runs(
    app: perdure.App,
) -> None:
    _define(app)
    first, second = app.start("collect", 2, key="first"), app.start("collect", 1)
    with BackgroundWorker(app, **FAST):
        # Runs by id or key, one of them twice: its signals keep their order.
        ids = app.signal_many(["first", second.id, first.id], "go", ["a", "b", "c"])
        assert len(set(ids)) == 3 and ids[0] < ids[2]
        assert first.result(timeout=30) == ["a", "c"]
        assert second.result(timeout=30) == ["b"]
        waiting = app.start("collect", 1)
        wait_until(
            lambda: any(s.name == "signal:go" for s in app.steps(waiting.id)),
            30,
            what="the run to wait for its signal",
        )
        # A run already parked at its wait is woken by the batch.
        asyncio.run(app.signal_many_async([waiting.id], "go", [{"x": 1}]))
        assert waiting.result(timeout=30) == [{"x": 1}]


def test_keys_are_honoured_within_a_batch_and_across_batches(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    _define(app)
    run = app.start("collect", 3)
    first = app.signal_many([run.id, run.id, run.id], "go", [1, 2, 3], keys=["a", "b", "a"])
    assert first[0] == first[2] != first[1]
    second = app.signal_many([run.id, run.id], "go", [4, 5], keys=["b", None])
    assert second[0] == first[1]
    assert [(s["payload"], s["key"]) for s in app.signals(run.id)] == [
        (1, "a"),
        (2, "b"),
        (5, None),
    ]
    assert _signals(db) == 3


def test_one_bad_item_refuses_the_whole_batch_naming_it(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    _define(app)
    runs = [app.start("collect", 1).id for _ in range(3)]
    with pytest.raises(perdure.SerializationError, match="item 1 of 3"):
        app.signal_many(runs, "go", [1, object(), 3])
    with pytest.raises(perdure.RunNotFound, match="item 2 of 3"):
        app.signal_many([runs[0], runs[1], "no-such-run"], "go")
    with pytest.raises(perdure.ConfigurationError, match="payloads has 2 items, runs has 3"):
        app.signal_many(runs, "go", [1, 2])
    assert _signals(db) == 0
    app.cancel(runs[1])
    with pytest.raises(perdure.InvalidRunState, match=r"item 1 of 3.*cancelled"):
        app.signal_many(runs, "go", [1, 2, 3])
    assert _signals(db) == 0
    assert app.signal_many([], "go") == []


def test_signals_reads_one_signal_by_its_id_and_refuses_a_bad_id(app: perdure.App) -> None:
    _define(app)
    run, other = app.start("collect", 3), app.start("collect", 1)
    sent = app.signal_many([run.id, run.id, other.id], "go", [1, 2, 3])
    (found,) = app.signals(run.id, signal_id=sent[1])
    assert (found["id"], found["payload"]) == (sent[1], 2)
    # Another run's signal is not this run's.
    assert app.signals(run.id, signal_id=sent[2]) == []
    for bad in (0, -1, True, "1", 2**63):
        with pytest.raises(perdure.ConfigurationError, match="signal_id"):
            app.signals(run.id, signal_id=bad)  # type: ignore[arg-type]
