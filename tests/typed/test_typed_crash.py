"""Typed round trip with real processes: a dataclass step output survives a SIGKILL.

The first worker checkpoints the ``price`` step (a ``Quote`` dataclass) and is
killed inside the next step. The second worker replays the run: its workflow
code must receive a ``Quote`` rebuilt from the checkpoint's JSON, which it
records in the ``seen`` table, and ``price`` must not run again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import perdure
from apps import typed_app
from helpers import wait_until

TARGET = "apps.typed_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


@pytest.fixture
def tables(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    db.execute("CREATE TABLE seen (run_id uuid, pid int, kind text)")
    return db


@pytest.mark.all_servers
def test_a_dataclass_step_output_is_rebuilt_on_replay_after_a_crash(
    app: perdure.App, tables: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    app.workflow("typed_order")(typed_app.typed_order)  # this App rebuilds the result too
    victim = spawn_worker(TARGET, *SHORT_LEASE, TYPED_SLOW_SECONDS="60")
    handle = app.start("typed_order", typed_app.Order(sku="tea", quantity=3))
    stored = tables.execute("SELECT input FROM runs WHERE id = %s", (handle.id,)).fetchone()
    assert stored == ({"sku": "tea", "quantity": 3},), "the input is stored as plain JSON"
    # The slow step has started: the price step's checkpoint is committed.
    wait_until(
        lambda: tables.execute("SELECT count(*) FROM ledger WHERE step = 'slow'").fetchone()[0],
        30,
        what="the run to reach its slow step",
    )
    (output,) = tables.execute(
        "SELECT output FROM steps WHERE run_id = %s AND name = 'price'", (handle.id,)
    ).fetchone()
    assert output == {"sku": "tea", "unit_cents": 250, "tags": ["fresh"]}
    victim.kill()
    rescuer = spawn_worker(TARGET, *SHORT_LEASE, TYPED_SLOW_SECONDS="0")

    receipt = handle.result(timeout=60)
    assert isinstance(receipt, typed_app.Receipt)
    assert receipt.total_cents == 750
    assert receipt.quotes == [typed_app.Quote(sku="tea", unit_cents=250, tags=["fresh"])]
    assert asyncio.run(handle.result_async(timeout=5)) == receipt
    seen = tables.execute("SELECT pid, kind FROM seen WHERE run_id = %s", (handle.id,)).fetchall()
    assert (victim.pid, "Order/Quote/True") in seen
    assert (rescuer.pid, "Order/Quote/True") in seen, "the replayed quote was not a Quote"
    steps = tables.execute(
        "SELECT step, count(*) FROM ledger WHERE run_id = %s GROUP BY step", (handle.id,)
    ).fetchall()
    assert dict(steps) == {"price": 1, "slow": 2}
    (result,) = tables.execute("SELECT output FROM runs WHERE id = %s", (handle.id,)).fetchone()
    assert result["total_cents"] == 750, "the result is stored as plain JSON"
