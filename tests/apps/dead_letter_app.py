"""A workflow whose third step kills every worker that runs it, for the dead-letter tests.

Each step and compensation leaves a row in ``ledger(id, run_id, step, pid)``,
written by plain SQL outside perdure when it starts, so the ledger counts
executions, the one the kill cut short included, in the order they began.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg

import perdure

app = perdure.App()


def effect(run_id: str, step: str) -> str:
    """Record that ``step`` began in this process."""
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, step, pid) VALUES (%s, %s, %s)",
            (run_id, step, os.getpid()),
        )
    return step


def kill_the_worker(run_id: str) -> None:
    """Record the attempt, then SIGKILL this worker process: the step never ends."""
    effect(run_id, "ship")
    os.kill(os.getpid(), signal.SIGKILL)


@app.workflow("doomed", max_lapses=2)
def doomed(ctx: perdure.SyncContext, _: Any = None) -> None:
    """reserve -> charge -> ship (kills its worker), each undone if the run fails."""
    ctx.step("reserve", effect, ctx.run_id, "reserve")
    ctx.on_rollback(effect, ctx.run_id, "release", name="release")
    ctx.step("charge", effect, ctx.run_id, "charge")
    ctx.on_rollback(effect, ctx.run_id, "refund", name="refund")
    ctx.step("ship", kill_the_worker, ctx.run_id)
    ctx.step("notify", effect, ctx.run_id, "notify")
