"""``start_many``: many runs in one statement, with the semantics of ``start`` for each."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from pydantic import BaseModel

import perdure


class Order(BaseModel):
    number: int


def _define(app: perdure.App) -> None:
    @app.workflow("welcome")
    def welcome(ctx: perdure.SyncContext, value: int) -> int:
        return value

    @app.workflow("typed_order")
    def typed_order(ctx: perdure.SyncContext, order: Order) -> int:
        return order.number


def _count(db: psycopg.Connection[tuple[object, ...]], table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]


def test_start_many_starts_every_run_in_order_and_each_completes(app: perdure.App) -> None:
    _define(app)
    handles = app.start_many("welcome", list(range(20)))
    assert len({h.id for h in handles}) == 20
    assert [app.get_run(h.id).input for h in handles] == list(range(20))
    assert app.run_until_complete(handles[-1]) == 19
    assert [h.result(timeout=10) for h in handles] == list(range(20))


def test_keys_are_honoured_within_a_batch_and_across_batches(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    _define(app)
    first = app.start_many("welcome", [1, 2, 3], keys=["a", "b", "a"])
    assert first[0].id == first[2].id != first[1].id
    second = app.start_many("welcome", [4, 5], keys=["b", "c"])
    assert second[0].id == first[1].id
    assert _count(db, "runs") == 3
    assert app.get_run("a").input == 1  # the first start of a key wins
    assert _count(db, "tasks") == 3
    history = db.execute("SELECT count(*) FROM history WHERE event = 'run_created'").fetchone()
    assert history is not None and history[0] == 3


def test_one_bad_input_refuses_the_whole_batch_naming_it(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    _define(app)
    with pytest.raises(perdure.SerializationError, match="item 2 of 4"):
        app.start_many("welcome", [1, 2, object(), 4])
    with pytest.raises(perdure.InvalidPayload, match="item 1 of 3"):
        app.start_many("typed_order", [{"number": 1}, {"number": "x"}, {"number": 3}])
    with pytest.raises(perdure.ConfigurationError, match="item 1 of 2"):
        app.start_many("welcome", [1, 2], keys=["ok", "x" * 10_000])
    with pytest.raises(perdure.ConfigurationError, match="keys has 1 items"):
        app.start_many("welcome", [1, 2], keys=["only"])
    assert _count(db, "runs") == 0


def test_start_many_in_the_callers_transaction_rolls_back_with_it(
    app: perdure.App, pg_url: str, schema: str, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    _define(app)
    with psycopg.connect(pg_url) as conn:
        conn.execute(f"SET search_path TO {schema}")
        rolled = app.start_many("welcome", [1, 2], keys=["r1", "r2"], conn=conn)
        conn.rollback()
        conn.execute(f"SET search_path TO {schema}")
        kept = app.start_many("welcome", [3, 4], keys=["r1", "k2"], conn=conn)
        conn.commit()
    assert _count(db, "runs") == 2
    assert app.get_run("r1").id == kept[0].id != rolled[0].id

    async def main() -> list[perdure.RunHandle]:
        async with await psycopg.AsyncConnection.connect(pg_url) as aconn:
            handles = await app.start_many_async("welcome", [5, 6], keys=["a1", "a2"], conn=aconn)
            await aconn.rollback()
            return handles

    asyncio.run(main())
    assert _count(db, "runs") == 2


def test_an_unknown_workflow_writes_nothing(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    with pytest.raises(perdure.UnknownWorkflow):
        app.start_many("nobody_registered_this", [1, 2])
    assert _count(db, "runs") == 0
