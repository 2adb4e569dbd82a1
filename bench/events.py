"""Emitted events: emit -> the waiting run's next step, and the cost of an emit as waits grow.

    python bench/events.py [--url URL] [--latency-runs 50] [--emits 200]
                           [--waits 10,10000,100000]

Without ``--url`` a throwaway PostgreSQL 15 cluster is made in a temporary
folder (PERDURE_PG_BIN, default /usr/lib/postgresql/15/bin) and removed after.

1. **Latency**: one in-process worker, idle; a run waits for ``bench.paid``
   matching its own order; the bench emits the event and reads when the step
   after the wait began. p50 and p95 of (step start - emit call), in ms.
2. **Emit cost**: N runs wait on *other* matches of the same event name (rows
   of ``event_waits`` for N runs in status 'waiting', written directly: the
   same index entries a parked wait files), and the bench times
   ``app.emit`` of an event that matches none of them, ``--emits`` times per
   N. Flat from 10 to 100,000: the emit looks waits up by (name, anchor) in an
   index, it does not scan them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

import perdure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def throwaway_server() -> Iterator[str]:
    """A PostgreSQL cluster of its own, removed afterwards; its URL."""
    bins = os.environ.get("PERDURE_PG_BIN", "/usr/lib/postgresql/15/bin")
    folder = tempfile.mkdtemp(prefix="perdure-events-bench-")
    data, port = os.path.join(folder, "data"), _free_port()
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if user:
        shutil.chown(folder, "postgres")
    subprocess.run(
        [*user, f"{bins}/initdb", "-D", data, "-U", "postgres", "-A", "trust"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *user,
            f"{bins}/pg_ctl",
            "-D",
            data,
            "-w",
            "-l",
            os.path.join(folder, "log"),
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*user, f"{bins}/pg_ctl", "-D", data, "-m", "fast", "stop"], capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)


def define(app: perdure.App) -> None:
    """The workflow of the latency measure."""

    @app.workflow("bench_event_wait")
    async def bench_event_wait(ctx: perdure.Context, order: int) -> float:
        await ctx.wait_for_event("bench.paid", {"order_id": order}, timeout=600)
        return await ctx.step("after", time.time)

    @app.workflow("bench_signal_wait")
    async def bench_signal_wait(ctx: perdure.Context, order: int) -> float:
        await ctx.wait_for_signal("paid", timeout=600)
        return await ctx.step("after", time.time)


def latency(app: perdure.App, runs: int) -> tuple[list[float], list[float]]:
    """(next step's start - emit call) in ms, one run at a time, with an idle worker;
    the same for a signal (app.signal), on the same worker, for comparison."""
    worker = app.worker(concurrency=4, poll_seconds=1.0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(worker.run()), daemon=True)
    thread.start()
    took: dict[str, list[float]] = {"bench_event_wait": [], "bench_signal_wait": []}
    try:
        for order in range(runs):
            for workflow in took:
                handle = app.start(workflow, order)
                deadline = time.monotonic() + 30
                while handle.status() != "waiting":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the run never reached its wait")
                    time.sleep(0.005)
                time.sleep(0.05)  # the worker is idle again
                began = time.time()
                if workflow == "bench_event_wait":
                    app.emit("bench.paid", {"order_id": order, "amount": 1})
                else:
                    app.signal(handle.id, "paid", {"amount": 1})
                after = float(handle.result(timeout=30))
                took[workflow].append((after - began) * 1000)
    finally:
        loop.call_soon_threadsafe(worker.request_stop)
        thread.join(30)
    return took["bench_event_wait"], took["bench_signal_wait"]


def add_waits(url: str, schema: str, count: int) -> None:
    """``count`` runs waiting on ``bench.paid`` for other orders, filed as parked waits are."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"""INSERT INTO {schema}.runs (id, workflow, version, queue, status, input,
                                           created_at, updated_at)
                SELECT gen_random_uuid(), 'bench_filler', 1, 'bench_filler', 'waiting', 'null',
                       now(), now()
                FROM generate_series(1, %s)""",
            (count,),
        )
        conn.execute(
            f"""INSERT INTO {schema}.event_waits (run_id, position, name, match, anchor, since)
                SELECT r.id, 0, 'bench.paid', m.match, {schema}.event_anchor(m.match), now()
                FROM (SELECT id, row_number() OVER () AS n FROM {schema}.runs
                      WHERE workflow = 'bench_filler'
                        AND NOT EXISTS (SELECT 1 FROM {schema}.event_waits w
                                        WHERE w.run_id = runs.id)) r,
                     LATERAL (SELECT jsonb_build_object('order_id', 1000000 + r.n) AS match) m"""
        )
        conn.execute(f"ANALYZE {schema}.event_waits")


def emit_cost(app: perdure.App, emits: int) -> list[float]:
    """ms per ``app.emit`` of an event that matches none of the waits."""
    took = []
    for i in range(emits):
        began = time.perf_counter()
        app.emit("bench.paid", {"order_id": -1 - i, "amount": 1})
        took.append((time.perf_counter() - began) * 1000)
    return took


def lookup_plan(url: str, schema: str) -> dict[str, Any]:
    """The emit's lookup of the waits, under EXPLAIN (ANALYZE, BUFFERS): its scan, time and
    buffers touched (the buffers do not depend on the machine's load)."""
    payload = json.dumps({"order_id": -1, "amount": 1})
    with psycopg.connect(url, autocommit=True) as conn:
        [(plan,)] = conn.execute(
            f"""EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
                SELECT w.run_id FROM {schema}.event_waits w JOIN {schema}.runs r ON r.id = w.run_id
                WHERE w.name = 'bench.paid'
                  AND w.anchor = ANY (array_append({schema}.event_anchors(%s::jsonb), ''))
                  AND %s::jsonb @> w.match AND r.status = 'waiting'""",
            (payload, payload),
        ).fetchall()
    top = plan[0]

    def scans(node: dict[str, Any]) -> list[str]:
        here = [f"{node['Node Type']} on {node.get('Index Name') or node.get('Relation Name')}"]
        here = here if "Scan" in node["Node Type"] else []
        return here + [s for child in node.get("Plans", []) for s in scans(child)]

    root = top["Plan"]
    return {
        "scans": scans(root),
        "execution_ms": round(top["Execution Time"], 3),
        "buffers": root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0),
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    """Run both measures and print a JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--latency-runs", type=int, default=50)
    parser.add_argument("--emits", type=int, default=200)
    parser.add_argument("--waits", default="10,10000,100000")
    args = parser.parse_args()
    sizes = [int(n) for n in args.waits.split(",")]
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(throwaway_server())
        schema = f"bench_events_{os.getpid()}"
        app = perdure.App(url, schema=schema)
        define(app)
        app.register()
        report: dict[str, Any] = {}
        lat, signal = latency(app, args.latency_runs)
        report["emit_to_next_step_ms"] = {
            "runs": len(lat),
            "p50": round(statistics.median(lat), 2),
            "p95": round(percentile(lat, 0.95), 2),
        }
        report["signal_to_next_step_ms_same_worker"] = {
            "runs": len(signal),
            "p50": round(statistics.median(signal), 2),
            "p95": round(percentile(signal, 0.95), 2),
        }
        curve = []
        have = 0
        for size in sizes:
            add_waits(url, schema, size - have)
            have = size
            cost = emit_cost(app, args.emits)
            curve.append(
                {
                    "waiting_runs": size,
                    "p50_ms": round(statistics.median(cost), 3),
                    "p95_ms": round(percentile(cost, 0.95), 3),
                    "lookup": lookup_plan(url, schema),
                }
            )
        report["emit_cost"] = curve
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
