"""What every peer script shares: its command line and the handshake with `perdure bench`.

A peer script sets itself up on the server (schema, workflow definitions),
enqueues ``--runs`` runs of its 3-step no-op workflow, prints ``READY`` and
waits for a line on its standard input. Then it executes them all with one
process and ``--concurrency`` at a time, and prints one JSON line:
``{"runs": N, "seconds": S, "runs_per_s": R}``. `perdure bench` reads the
server's counters around that second phase only, so setup and enqueueing are
not counted, exactly as for perdure.

With ``--fanout N`` a peer measures a fan-out instead: after the go, with
its worker idle, it starts N tasks of one no-op step and waits for all of
them, ``--fanouts`` times in a row, and prints ``{"fanout": N, "ms": [...]}``
(each fan-out's milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql


def arguments() -> argparse.Namespace:
    """--database-url, --runs, --concurrency, --schema (created, empty, if missing),
    --fanout and --fanouts."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--schema", default="bench_peer")
    parser.add_argument("--fanout", type=int, default=0)
    parser.add_argument("--fanouts", type=int, default=5)
    args = parser.parse_args()
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(args.schema)))
    return args


def finish() -> None:
    """Leave at once: some peers' native threads crash the interpreter's shutdown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def fan_out(once: Callable[[], Awaitable[Any]], width: int, times: int) -> None:
    """Say READY, wait for the go, time ``once()`` (one fan-out) ``times`` times, print them."""
    print("READY", flush=True)
    sys.stdin.readline()
    took: list[float] = []
    for _ in range(times):
        started = time.perf_counter()
        await once()
        took.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"fanout": width, "ms": took}), flush=True)


async def handshake(execute: Callable[[], Awaitable[Any]], runs: int) -> None:
    """Say READY, wait for the go, run ``execute`` and print the result line."""
    print("READY", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    await execute()
    seconds = time.perf_counter() - started
    print(json.dumps({"runs": runs, "seconds": seconds, "runs_per_s": runs / seconds}), flush=True)
