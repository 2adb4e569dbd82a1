"""Workflows for the event batch tests across processes.

``tally`` is started by batches of ``tick`` events. Its step writes a row to
``batch_ledger(run_id, event_ids, pid)`` by plain SQL outside perdure (so it
counts executions, a crash's too), then sleeps ``BATCH_STEP_SECONDS``
(environment; default 0) so a test can kill its worker in there.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import psycopg

import perdure

app = perdure.App()


def _record(run_id: str, event_ids: list[int]) -> int:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.batch_ledger (run_id, event_ids, pid) VALUES (%s, %s, %s)",
            (run_id, event_ids, os.getpid()),
        )
    time.sleep(float(os.environ.get("BATCH_STEP_SECONDS", "0")))
    return os.getpid()


@app.workflow(
    "tally",
    on_event=perdure.EventTrigger("tick", batch_size=10, batch_window=timedelta(milliseconds=300)),
)
async def tally(ctx: perdure.Context, events: list[dict[str, Any]]) -> list[int]:
    """Record the batch's event ids once (a step), return them."""
    ids = [int(e["id"]) for e in events]
    await ctx.step("record", _record, ctx.run_id, ids)
    return ids
