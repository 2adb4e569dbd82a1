"""Throughput: N runs of a 3-step no-op workflow through the queue, one worker process.

Usage: python bench/throughput.py [--runs N] [--concurrency C] [--repeat R] [--database-url URL]
                                  [--encrypt off|on|both]

The runs are started first, due in an hour, while one `perdure worker` process
(bench_app.py) waits idle. One UPDATE then makes them all due at once (its
NOTIFY wakes the worker), and the clock runs from that statement to the last
completion, both read from the database. Around that window the server's
counters give transactions, statements and WAL flushes per step; the worker
reports its own statements and round trips. `perdure bench` runs this as part
of its table; run alone, it prints one line per repetition.

``--encrypt on`` runs it with every payload encrypted (AES-256-GCM, a fresh key
in ``PERDURE_ENCRYPTION_KEYS`` for the starting App and the worker alike);
``--encrypt both`` alternates off and on, one of each per repetition, and
ends with the median of each and the cost of encryption per step.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import (
    Probe,
    WorkerProcess,
    counting,
    drop_schema,
    quantile,
    server_cpu_seconds,
    standalone,
)
from psycopg import sql

import perdure

STEPS = 3


def measure(
    url: str, probe: Probe, runs: int, concurrency: int, *, schema: str | None = None
) -> dict[str, Any]:
    """One repetition on a fresh schema (or ``schema``, kept); the figures as a dict."""
    own_schema = schema is None
    schema = schema or f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        stats_file = Path(folder) / "worker.json"
        worker = WorkerProcess(url, schema, concurrency, stats_file)
        try:
            worker.wait_ready(probe)
            enqueued_after = probe.query_one("SELECT now()")
            asyncio.run(_enqueue(app, runs))
            figures = _window(probe, worker, schema, runs, enqueued_after)
            figures["worker"] = worker.stop()
        finally:
            if worker.process.poll() is None:
                worker.process.kill()
    steps = runs * STEPS
    window = figures.pop("window")
    per_step = window.per(steps)
    stats = figures["worker"]
    figures.update(
        commits_per_step=per_step["transactions"],
        statements_per_step=per_step["statements"],
        wal_flushes_per_step=per_step["wal_flushes"],
        round_trips_per_step=(stats["round_trips"] / steps) if "round_trips" in stats else None,
        worker_statements_per_step=(stats["statements"] / steps) if "statements" in stats else None,
    )
    if own_schema:
        drop_schema(probe, schema)
    app.close()
    return figures


async def _enqueue(app: perdure.App, runs: int) -> None:
    """Start ``runs`` runs due in an hour, 50 at a time."""
    for first in range(0, runs, 50):
        await asyncio.gather(
            *(
                app.start_async("bench_noop3", delay=3600)
                for _ in range(first, min(runs, first + 50))
            )
        )


def _window(
    probe: Probe, worker: WorkerProcess, schema: str, runs: int, enqueued_after: Any
) -> dict[str, Any]:
    name = sql.Identifier(schema)
    cpu_before, server_before = worker.cpu_seconds(), server_cpu_seconds(probe)
    completed = sql.SQL(
        "SELECT count(*) FROM {}.runs WHERE workflow = 'bench_noop3' AND status = 'completed'"
    ).format(name)
    # A kept schema (the preloaded one) holds the runs of earlier repetitions.
    before = probe.query_one(completed)
    with counting(probe) as window:
        released_at = probe.query_one(
            sql.SQL(
                "UPDATE {}.tasks SET available_at = now() WHERE workflow = 'bench_noop3'"
                " RETURNING now()"
            ).format(name)
        )
        deadline = time.monotonic() + max(120.0, runs / 20)
        done = 0
        while time.monotonic() < deadline:
            done = probe.query_one(completed) - before
            if done >= runs:
                break
            time.sleep(0.1)
        if done < runs:
            raise RuntimeError(f"only {done} of {runs} runs completed in time")
        cpu = worker.cpu_seconds() - cpu_before
        server_now = server_cpu_seconds(probe)
        server_cpu = None
        if server_now is not None and server_before is not None:
            server_cpu = server_now - server_before
        connections = worker.connections(probe)
        last = probe.query_one(
            sql.SQL("SELECT max(completed_at) FROM {}.runs WHERE workflow = 'bench_noop3'").format(
                name
            )
        )
        latencies = probe.query_one(
            sql.SQL(
                "SELECT array_agg(latency) FROM (SELECT extract(epoch FROM s.completed_at"
                " - coalesce(lag(s.completed_at) OVER (PARTITION BY s.run_id"
                " ORDER BY s.position), r.started_at)) AS latency"
                " FROM {}.steps s JOIN {}.runs r ON r.id = s.run_id"
                " WHERE r.workflow = 'bench_noop3' AND r.created_at > %s) l"
            ).format(name, name),
            (enqueued_after,),
        )
    seconds = (last - released_at).total_seconds()
    latencies = [float(x) for x in latencies or []]
    return {
        "runs": runs,
        "seconds": seconds,
        "runs_per_s": runs / seconds,
        "steps_per_s": runs * STEPS / seconds,
        "step_p50_ms": _ms(quantile(latencies, 0.5)),
        "step_p99_ms": _ms(quantile(latencies, 0.99)),
        "worker_cpu_ms_per_run": 1000 * cpu / runs,
        "server_cpu_ms_per_run": None if server_cpu is None else 1000 * server_cpu / runs,
        "worker_connections": connections,
        "window": window,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def main() -> None:
    """Run the benchmark alone and print one line per repetition."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--encrypt", choices=("off", "on", "both"), default="off")
    with standalone(parser) as (args, server, probe):
        modes = {"off": [False], "on": [True], "both": [False, True]}[args.encrypt]
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):
            for encrypted in modes:
                with _encryption(encrypted):
                    f = measure(server.url, probe, args.runs, args.concurrency)
                rates[encrypted].append(f["steps_per_s"])
                cpu[encrypted].append(f["worker_cpu_ms_per_run"])
                print(f"encryption {'on ' if encrypted else 'off'}: " + _line(f))
        if args.encrypt == "both":
            off, on = statistics.median(rates[False]), statistics.median(rates[True])
            print(
                f"median of {args.repeat}: {off:.0f} steps/s off, {on:.0f} steps/s on "
                f"({100 * (on - off) / off:+.1f}%; {1e6 / on - 1e6 / off:+.1f} us per step); "
                f"worker CPU {statistics.median(cpu[False]):.2f} ms/run off, "
                f"{statistics.median(cpu[True]):.2f} ms/run on"
            )


class _encryption:
    """While entered (if ``on``), every App and worker started here encrypts payloads."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.saved = os.environ.get("PERDURE_ENCRYPTION_KEYS")

    def __enter__(self) -> None:
        from perdure.store.encryption import generate_key_line

        if self.on:
            os.environ["PERDURE_ENCRYPTION_KEYS"] = generate_key_line("bench")
        else:
            os.environ.pop("PERDURE_ENCRYPTION_KEYS", None)

    def __exit__(self, *_: object) -> None:
        if self.saved is None:
            os.environ.pop("PERDURE_ENCRYPTION_KEYS", None)
        else:
            os.environ["PERDURE_ENCRYPTION_KEYS"] = self.saved


def _line(f: dict[str, Any]) -> str:
    return (
        f"{f['runs_per_s']:.0f} runs/s, {f['steps_per_s']:.0f} steps/s, "
        f"step p50 {f['step_p50_ms']:.1f} ms p99 {f['step_p99_ms']:.1f} ms; per step: "
        f"{_fmt(f['commits_per_step'])} commits, {_fmt(f['statements_per_step'])} "
        f"statements, {_fmt(f['wal_flushes_per_step'])} WAL flushes, "
        f"{_fmt(f['round_trips_per_step'])} round trips; worker CPU "
        f"{f['worker_cpu_ms_per_run']:.2f} ms/run, server CPU "
        f"{_fmt(f['server_cpu_ms_per_run'])} ms/run, "
        f"{f['worker_connections']} connections; "
        f"worker: {f['worker']}"
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
