"""Workflows in throttled queues; each step writes what it saw to a ledger.

The ledger (``ledger(id bigserial, run_id, event, key, at, pid)``) is written
by plain SQL outside perdure, in autocommit:

- "metered" (3 claims per second, across all workers): the step records the
  moment its task was claimed (``tasks.claimed_at``, the claim's own clock)
  as event 'claimed'.
- "parted" (one running task per partition key): the step records 'enter'
  and 'exit' with its key; replaying the ledger in id order gives how many
  ran at once per key.
- "ordered" (one running task in all): the step records 'enter'.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import perdure

RATE = (3, 1.0)


def _ledger(statement: str, params: tuple[Any, ...]) -> None:
    """Run ``statement`` (``{schema}`` is the test's schema) in autocommit."""
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(statement.replace("{schema}", schema), params)  # type: ignore[arg-type]


def _log(run_id: str, event: str, key: str | None = None) -> None:
    _ledger(
        "INSERT INTO {schema}.ledger (run_id, event, key, at, pid) "
        "VALUES (%s, %s, %s, clock_timestamp(), %s)",
        (run_id, event, key, os.getpid()),
    )


def metered_step(run_id: str) -> int:
    """Record when this run's task was claimed."""
    _ledger(
        "INSERT INTO {schema}.ledger (run_id, event, at, pid) "
        "SELECT run_id, 'claimed', claimed_at, %s FROM {schema}.tasks "
        "WHERE run_id = %s AND status = 'claimed'",
        (os.getpid(), run_id),
    )
    return os.getpid()


def parted_step(run_id: str, key: str, seconds: float) -> int:
    """Record the entry, work for ``seconds``, record the exit."""
    _log(run_id, "enter", key)
    time.sleep(seconds)
    _log(run_id, "exit", key)
    return os.getpid()


def ordered_step(run_id: str) -> int:
    """Record the entry."""
    _log(run_id, "enter")
    return os.getpid()


def define(target: perdure.App) -> None:
    """Declare the queues and workflows on ``target``."""
    target.queue("metered", rate_limit=RATE)
    target.queue("parted", partition_concurrency=1)
    target.queue("ordered", concurrency=1)

    @target.workflow("metered", queue="metered")
    def metered(ctx: perdure.SyncContext, n: Any) -> int:
        return ctx.step("metered_step", metered_step, ctx.run_id)

    @target.workflow("parted", queue="parted")
    def parted(ctx: perdure.SyncContext, job: dict[str, Any]) -> int:
        return ctx.step("parted_step", parted_step, ctx.run_id, job["key"], job["seconds"])

    @target.workflow("ordered", queue="ordered")
    def ordered(ctx: perdure.SyncContext, n: Any) -> int:
        return ctx.step("ordered_step", ordered_step, ctx.run_id)


app = perdure.App()
define(app)
