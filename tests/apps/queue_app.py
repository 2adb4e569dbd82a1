"""Workflows for the queue-limit tests: every step execution is logged on entry and exit.

The ledger (``ledger(id bigserial, run_id, event, pid)``) is written by plain
SQL outside perdure, in autocommit, when the step starts ('enter') and just
before it returns ('exit'). Replaying the ledger in id order gives how many
executions were inside a step at once.
"""

from __future__ import annotations

import os
import time

import psycopg

import perdure

app = perdure.App()
media = app.queue("media", concurrency=2, worker_concurrency=1)


def _log(run_id: str, event: str) -> None:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, event, pid) VALUES (%s, %s, %s)",
            (run_id, event, os.getpid()),
        )


def encode_file(run_id: str, seconds: float) -> int:
    """Log the entry, work for ``seconds``, log the exit."""
    _log(run_id, "enter")
    time.sleep(seconds)
    _log(run_id, "exit")
    return os.getpid()


@app.workflow("encode", queue=media.name)
def encode(ctx: perdure.SyncContext, seconds: float) -> int:
    """One step that takes ``seconds``, in the limited queue."""
    return ctx.step("encode_file", encode_file, ctx.run_id, seconds)
