"""Emitted events under load: 1,000 events/s into 10,000 waiting runs, all woken, none twice.

Usage: python bench/event_load.py [--runs 10000] [--rate 1000] [--emitters 8]
                                  [--concurrency 32] [--idle-samples 100]
                                  [--via app|sql] [--batch N] [--database-url URL]

First, with the worker process idle (nothing else to do), ``--idle-samples``
runs wait one at a time and the bench emits each one's event: emit call ->
the run's next step, p50/p99 (and the emit call alone). The worker is a
process of its own, as deployed: the emitter and the worker do not share an
interpreter.

One ``perdure worker bench_app:app`` process (``--concurrency``) drives
``--runs`` runs of ``bench_event_load`` to their wait (event ``load.paid``
matching each run's own order). Then ``--emitters`` threads of the bench
emit one event per run, paced together at ``--rate`` events/s, in a
shuffled order, each recording when it called emit: with ``app.emit``
(``--via app``), or with ``SELECT emit_event(...)`` on a psycopg connection
of each thread's own (``--via sql``: what another language's driver does,
without the Python App's own costs in the one bench process). With
``--batch N`` each call emits N events at once, in one transaction:
``app.emit_many`` or ``SELECT emit_events(<JSON array>)``; the calls are
paced so that the events still go out at ``--rate``. Reported,
from the database once every run has completed:

- the achieved emit rate (events / seconds from the first emit call to the
  last emit's return) and the emit call's p50/p99;
- ``woken``: runs completed, and ``twice``: runs that took more than one
  event, events delivered to more than one run, or waits recorded twice
  (history ``event_consumed``): all 0 when none is woken twice;
- the latency from each emit call to the start of the woken run's next step
  (its output: time.time() in the worker), p50/p99/max, and how long the
  worker took to drain them all.

The machine's ``uptime`` is printed before and after: the figures depend on
what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from harness import Probe, WorkerProcess, drop_schema, quantile, standalone

import perdure


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _count(probe: Probe, query: str) -> int:
    return int(probe.query_one(query))


def park(app: perdure.App, probe: Probe, schema: str, runs: int) -> float:
    """Start ``runs`` runs and wait until all wait for their event; seconds taken."""
    began = time.monotonic()
    for first in range(0, runs, 1000):
        app.start_many("bench_event_load", list(range(first, min(runs, first + 1000))))
    deadline = time.monotonic() + 600
    while _count(probe, f"SELECT count(*) FROM {schema}.event_waits") < runs:
        if time.monotonic() > deadline:
            raise RuntimeError("the runs did not all reach their wait within 600 s")
        time.sleep(0.2)
    return time.monotonic() - began


def idle_latency(app: perdure.App, probe: Probe, schema: str, samples: int) -> dict[str, Any]:
    """One run at a time waits, then its event is emitted: ms from the emit call to the
    next step's start, and the emit call alone."""
    total: list[float] = []
    emit: list[float] = []
    for n in range(samples):
        order = -1 - n
        handle = app.start("bench_event_load", order)
        deadline = time.monotonic() + 30
        while not _count(
            probe, f"SELECT count(*) FROM {schema}.event_waits WHERE run_id = '{handle.id}'"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the run did not reach its wait within 30 s")
            time.sleep(0.005)
        time.sleep(0.05)  # the worker is idle again
        began = time.time()
        app.emit("load.paid", {"order_id": order, "amount": 1})
        emit.append((time.time() - began) * 1000)
        total.append((float(handle.result(timeout=30)) - began) * 1000)
    return {
        "samples": samples,
        "emit_to_next_step_ms": {
            "p50": round(quantile(total, 0.5) or 0, 2),
            "p99": round(quantile(total, 0.99) or 0, 2),
        },
        "emit_call_ms": {
            "p50": round(quantile(emit, 0.5) or 0, 2),
            "p99": round(quantile(emit, 0.99) or 0, 2),
        },
    }


def emit_all(
    app: perdure.App,
    orders: list[int],
    rate: float,
    emitters: int,
    sql_door: tuple[str, str] | None,
    batch: int = 1,
) -> tuple[dict[int, float], list[float], float]:
    """Emit ``load.paid`` for each order, paced at ``rate``/s over ``emitters`` threads,
    ``batch`` events a call: the emit call time per order, each call's ms, and the
    seconds from first call to last return."""
    called: dict[int, float] = {}
    took: list[float] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.2
    wall = time.time() - time.monotonic()

    def emitter(k: int) -> None:
        conn = None if sql_door is None else psycopg.connect(sql_door[0], autocommit=True)
        for first in range(k * batch, len(orders), emitters * batch):
            chunk = orders[first : first + batch]
            due = start + first / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            began = time.monotonic()
            payloads = [{"order_id": order, "amount": 1} for order in chunk]
            if batch == 1 and conn is None:
                app.emit("load.paid", payloads[0])
            elif batch == 1 and conn is not None:
                conn.execute(sql_door[1], ("load.paid", json.dumps(payloads[0])))
            elif conn is None:
                app.emit_many([("load.paid", payload) for payload in payloads])
            else:
                events = [{"name": "load.paid", "payload": payload} for payload in payloads]
                conn.execute(sql_door[1], (json.dumps(events),))
            ended = time.monotonic()
            with lock:
                for order in chunk:
                    called[order] = began + wall
                took.append((ended - began) * 1000)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=emitter, args=(k,)) for k in range(emitters)]
    first = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return called, took, time.monotonic() - max(first, start)


def main() -> None:
    """Park the runs, emit at the rate, count from the database, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--emitters", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--idle-samples", type=int, default=100)
    parser.add_argument("--via", choices=("app", "sql"), default="app")
    parser.add_argument(
        "--batch", type=int, default=1, help="events per call (emit_many / emit_events); 1: emit"
    )
    with standalone(parser) as (args, server, probe):
        print("uptime before:", _uptime(), flush=True)
        schema = f"bench_event_load_{uuid.uuid4().hex[:8]}"
        app = perdure.App(server.url, schema=schema, pool_size=args.emitters + 2)
        app.ensure_schema()
        stats = Path(tempfile.mkdtemp(prefix="perdure-event-load-")) / "stats.json"
        worker = WorkerProcess(server.url, schema, args.concurrency, stats)
        try:
            worker.wait_ready(probe)
            idle: dict[str, Any] = {}
            if args.idle_samples:
                idle = idle_latency(app, probe, schema, args.idle_samples)
                print("idle worker:", idle, "| uptime:", _uptime(), flush=True)
            parked = park(app, probe, schema, args.runs)
            print(f"{args.runs} runs waiting after {parked:.1f} s", flush=True)
            orders = list(range(args.runs))
            random.Random(7).shuffle(orders)
            door = None
            if args.via == "sql" and args.batch > 1:
                door = (server.url, f'SELECT "{schema}".emit_events(%s::jsonb)')
            elif args.via == "sql":
                door = (server.url, f'SELECT "{schema}".emit_event(%s, %s::jsonb)')
            called, took, seconds = emit_all(
                app, orders, args.rate, args.emitters, door, max(1, args.batch)
            )
            emitted_at = time.monotonic()
            deadline = time.monotonic() + 600
            q = (
                f"SELECT count(*) FROM {schema}.runs WHERE workflow = 'bench_event_load' "
                "AND (input::text)::int >= 0"
            )
            while _count(probe, q + " AND status = 'completed'") < args.runs:
                if time.monotonic() > deadline:
                    raise RuntimeError("not every run completed within 600 s")
                time.sleep(0.1)
            drained = time.monotonic() - emitted_at
            rows = probe.query(
                f"SELECT input, output FROM {schema}.runs WHERE workflow = 'bench_event_load' "
                "AND (input::text)::int >= 0"
            )
            latency = [(float(out) - called[int(inp)]) * 1000 for inp, out in rows]
            counts: dict[str, Any] = {
                "runs_completed": _count(probe, q + " AND status = 'completed'"),
                "events": _count(
                    probe,
                    f"SELECT count(*) FROM {schema}.emitted_events "
                    "WHERE (payload ->> 'order_id')::int >= 0",
                ),
                "deliveries": _count(
                    probe,
                    f"SELECT count(*) FROM {schema}.event_deliveries d "
                    f"JOIN {schema}.emitted_events e ON e.id = d.event_id "
                    "WHERE (e.payload ->> 'order_id')::int >= 0",
                ),
                "runs_taking_2_or_more": _count(
                    probe,
                    f"SELECT count(*) FROM (SELECT run_id FROM {schema}.event_deliveries "
                    "GROUP BY run_id HAVING count(*) > 1) t",
                ),
                "events_delivered_twice": _count(
                    probe,
                    f"SELECT count(*) FROM (SELECT event_id FROM {schema}.event_deliveries "
                    "GROUP BY event_id HAVING count(*) > 1) t",
                ),
                "waits_consumed_twice": _count(
                    probe,
                    f"SELECT count(*) FROM (SELECT run_id FROM {schema}.history "
                    "WHERE event = 'event_consumed' GROUP BY run_id HAVING count(*) > 1) t",
                ),
                "after_steps": _count(
                    probe,
                    f"SELECT count(*) FROM {schema}.steps s JOIN {schema}.runs r "
                    "ON r.id = s.run_id WHERE s.name = 'after' AND (r.input::text)::int >= 0",
                ),
            }
            report = {
                "idle_worker": idle,
                "runs": args.runs,
                "emitted_via": args.via,
                "batch": args.batch,
                "target_rate": args.rate,
                "achieved_rate": round(len(called) / seconds, 1),
                "emit_call_ms" if args.batch <= 1 else "emit_many_call_ms": {
                    "p50": round(quantile(took, 0.5) or 0, 2),
                    "p99": round(quantile(took, 0.99) or 0, 2),
                },
                "emit_to_next_step_ms": {
                    "p50": round(quantile(latency, 0.5) or 0, 1),
                    "p99": round(quantile(latency, 0.99) or 0, 1),
                    "max": round(max(latency), 1),
                },
                "drained_after_last_emit_s": round(drained, 2),
                "counts": counts,
            }
            print(json.dumps(report, indent=2))
        finally:
            worker.stop()
            app.close()
            drop_schema(probe, schema)
            print("uptime after:", _uptime(), flush=True)


if __name__ == "__main__":
    main()
