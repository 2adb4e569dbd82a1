"""Sizing figures: what a rate of steps costs the server in CPU, WAL and connections.

Usage: python bench/sizing.py [--runs N] [--repeat R] [--workers W] [--concurrency C]
                              [--history-rows H] [--settle S] [--json PATH] [--database-url URL]

Two fleets of ``--workers`` `perdure worker` processes (bench_app.py) serve two
schemas of one server: one empty, one holding about ``--history-rows`` rows of
history (runs of 3 steps, 6 history rows each, spread over 30 days in day
partitions, a few thousand of them live: bench/history_scale.py's generator).
Then, ``--repeat`` times and alternating the two schemas, ``--runs``
runs of the 3-step no-op workflow are started due in an hour and released at
once (as bench/throughput.py does), and from the release to the last
completion the bench reads (after a VACUUM of both schemas, a CHECKPOINT, and one
repetition per schema not counted, so that full-page images after the checkpoint
and autovacuum of the generated rows stay out of the figures):

- runs/s and steps/s (the server's clock: release to last completion);
- the server's CPU (every process of its postmaster, from /proc) and the
  workers', per step, and the server's CPU as vCPUs in use over the window;
  the server's CPU around the starts too (``App.start_async``, 50 at a time), per run;
- WAL bytes, ``pg_wal_lsn_diff(pg_current_wal_lsn())`` around the starts (per
  run) and around the execution (per step; the bench's own release UPDATE,
  read inside its transaction with ``pg_current_wal_insert_lsn()``, taken
  out), and the full-page images among them (``pg_stat_wal.wal_fpi``);
- commits per step (``pg_stat_database``, less the bench's own statements);
- each worker's connections (``pg_stat_activity`` by ``application_name``,
  the listener included), sampled every 50 ms: the most and the mean;
- the 1-minute load average of the machine, at the start and the end.

At the end both fleets are left idle for ``--settle`` s (an idle pool closes
one connection per 10 s without use), and their connections are sampled for
3 s: the idle connections per worker, with what they are.

It prints one line per repetition, then the median of each figure per schema,
with the figures a sizing guide needs: steps/s per server vCPU
(1000 / server CPU ms per step) and per worker vCPU. ``--json`` also writes
every repetition. Without ``--database-url`` it starts its own embedded server
(allowing 200 connections, or ``8 x workers + 50`` past 20 workers; fsync and
synchronous_commit on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    Probe,
    WorkerProcess,
    counting,
    drop_schema,
    server_cpu_seconds,
    standalone,
)
from history_scale import generate
from psycopg import sql
from throughput import _enqueue

import perdure

STEPS = 3
WORKFLOW = "bench_noop3"


class ConnectionSampler:
    """A thread that counts each worker's connections every ``period`` s on its own connection."""

    def __init__(self, url: str, worker_ids: list[str], period: float = 0.05) -> None:
        """Sample the connections of the workers ``worker_ids`` (their application names)."""
        self.conn = psycopg.connect(url, autocommit=True, application_name="perdure-bench-sampler")
        self.names = {f"perdure-worker-{w}"[:50]: w for w in worker_ids}
        self.period = period
        self.samples: list[dict[str, int]] = []
        #: The sampler's statements (each one autocommit transaction), to take out of counts.
        self.statements = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> dict[str, int]:
        """Each worker's connections now (statement pools and listener together)."""
        self.statements += 1
        rows = self.conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity"
            " WHERE application_name LIKE 'perdure-worker-%' GROUP BY 1"
        ).fetchall()
        found = dict.fromkeys(self.names.values(), 0)
        for name, count in rows:
            base = name.removesuffix("-listen")
            if base in self.names:
                found[self.names[base]] += int(count)
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.period)

    def __enter__(self) -> ConnectionSampler:
        """Start sampling."""
        self.samples.clear()
        self.statements = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop.clear()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def per_worker(self) -> tuple[float, float]:
        """The most connections any worker held in a sample, and the mean per worker."""
        if not self.samples:
            return 0.0, 0.0
        most = max(max(s.values()) for s in self.samples)
        mean = statistics.mean(statistics.mean(s.values()) for s in self.samples)
        return float(most), mean

    def close(self) -> None:
        """Close the sampler's connection."""
        self.conn.close()


class Fleet:
    """``workers`` worker processes serving one schema, with a connection sampler."""

    def __init__(self, url: str, schema: str, workers: int, concurrency: int, folder: Path):
        """Start the workers (wait for them with :meth:`ready`)."""
        self.url, self.schema = url, schema
        self.app = perdure.App(url, schema=schema)
        self.app.ensure_schema()
        self.workers = [
            WorkerProcess(url, schema, concurrency, folder / f"{schema}-{i}.json")
            for i in range(workers)
        ]

    def ready(self, probe: Probe) -> None:
        """Wait until every worker listens, then run one run (pools connected, prepared)."""
        for worker in self.workers:
            worker.wait_ready(probe, timeout=300)
        self.app.start("bench_first").result(timeout=60)
        self.sampler = ConnectionSampler(self.url, [w.worker_id for w in self.workers])

    def cpu_seconds(self) -> float:
        """CPU seconds the workers used so far."""
        return sum(w.cpu_seconds() for w in self.workers)

    def stop(self) -> None:
        """Stop the workers and close the App and the sampler."""
        for worker in self.workers:
            worker.stop()
        self.app.close()
        if hasattr(self, "sampler"):
            self.sampler.close()


def idle_connections(probe: Probe, fleet: Fleet, seconds: float = 3.0) -> dict[str, Any]:
    """Each worker's connections over ``seconds`` (most, mean), the fleet idle, and
    what the first worker's are (application name and state)."""
    with fleet.sampler:
        time.sleep(seconds)
    most, mean = fleet.sampler.per_worker()
    kinds = probe.query(
        "SELECT application_name, state, count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE %s GROUP BY 1, 2 ORDER BY 1, 2",
        (f"perdure-worker-{fleet.workers[0].worker_id}"[:50] + "%",),
    )
    return {
        "idle_connections_most": most,
        "idle_connections_mean": mean,
        "idle_kinds": [f"{name} ({state}): {count}" for name, state, count in kinds],
    }


def _lsn(probe: Probe) -> str:
    return str(probe.query_one("SELECT pg_current_wal_lsn()"))


def _wal_diff(probe: Probe, later: str, earlier: str) -> int:
    return int(probe.query_one("SELECT pg_wal_lsn_diff(%s, %s)", (later, earlier)))


def _fpi(probe: Probe) -> int | None:
    try:
        probe.query_one("SELECT pg_stat_clear_snapshot()")
        return int(probe.query_one("SELECT wal_fpi FROM pg_stat_wal"))
    except psycopg.Error:
        return None


def measure(probe: Probe, fleet: Fleet, runs: int) -> dict[str, Any]:
    """One repetition on ``fleet``: start ``runs`` runs, release them, and read every figure."""
    name = sql.Identifier(fleet.schema)
    load_before = os.getloadavg()[0]
    completed = sql.SQL(
        "SELECT count(*) FROM {}.runs WHERE workflow = %s AND status = 'completed'"
    ).format(name)
    before_done = probe.query_one(completed, (WORKFLOW,))
    lsn_start, start_cpu = _lsn(probe), server_cpu_seconds(probe)
    asyncio.run(_enqueue(fleet.app, runs))
    lsn_started, started_cpu = _lsn(probe), server_cpu_seconds(probe)
    start_wal = _wal_diff(probe, lsn_started, lsn_start)
    fpi_before = _fpi(probe)
    worker_cpu, server_cpu = fleet.cpu_seconds(), server_cpu_seconds(probe)
    with counting(probe) as window, fleet.sampler:
        lsn_before = _lsn(probe)
        # The release, in a transaction: its own WAL is read before it commits
        # (and so before any worker is woken), to be taken out.
        with probe.conn.transaction():
            insert_from = probe.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            released_at = probe.conn.execute(
                sql.SQL(
                    "UPDATE {}.tasks SET available_at = now() WHERE workflow = %s"
                    " AND status = 'ready' RETURNING now()"
                ).format(name),
                (WORKFLOW,),
            ).fetchone()
            insert_to = probe.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        probe.own += 1  # one transaction (three statements)
        assert insert_from and insert_to and released_at
        release_wal = _wal_diff(probe, str(insert_to[0]), str(insert_from[0]))
        deadline = time.monotonic() + max(120.0, runs / 20)
        while True:
            done = probe.query_one(completed, (WORKFLOW,)) - before_done
            if done >= runs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done} of {runs} runs completed in time")
            time.sleep(0.05)
        lsn_after = _lsn(probe)
        worker_cpu = fleet.cpu_seconds() - worker_cpu
        server_now = server_cpu_seconds(probe)
        last = probe.query_one(
            sql.SQL("SELECT max(completed_at) FROM {}.runs WHERE workflow = %s").format(name),
            (WORKFLOW,),
        )
    fpi_after = _fpi(probe)
    window.transactions -= fleet.sampler.statements
    seconds = (last - released_at[0]).total_seconds()
    steps = runs * STEPS
    exec_wal = _wal_diff(probe, lsn_after, lsn_before) - release_wal
    busy_most, busy_mean = fleet.sampler.per_worker()
    server = None if server_now is None or server_cpu is None else server_now - server_cpu
    start_server = None if start_cpu is None or started_cpu is None else started_cpu - start_cpu
    return {
        "runs": runs,
        "seconds": seconds,
        "server_cpu_ms_per_run_start": None if start_server is None else 1000 * start_server / runs,
        "runs_per_s": runs / seconds,
        "steps_per_s": steps / seconds,
        "server_cpu_ms_per_step": None if server is None else 1000 * server / steps,
        "server_vcpus_busy": None if server is None else server / seconds,
        "worker_cpu_ms_per_step": 1000 * worker_cpu / steps,
        "wal_bytes_per_run_start": start_wal / runs,
        "wal_bytes_per_step": exec_wal / steps,
        "wal_bytes_per_step_all_in": (start_wal + exec_wal) / steps,
        "fpi_per_step": (
            None if fpi_before is None or fpi_after is None else (fpi_after - fpi_before) / steps
        ),
        "commits_per_step": window.transactions / steps,
        "busy_connections_most": busy_most,
        "busy_connections_mean": busy_mean,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def settle_server(probe: Probe, schemas: Any) -> None:
    """VACUUM the tables of ``schemas`` (the generated rows get their hint bits and
    visibility map now, not by autovacuum during a window), then CHECKPOINT."""
    for schema in schemas:
        for table in ("runs", "steps", "history", "tasks"):
            probe.run(
                sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            )
    probe.run("CHECKPOINT")


def history_rows(probe: Probe, schema: str) -> int:
    """Rows of history in ``schema`` now."""
    return int(
        probe.query_one(sql.SQL("SELECT count(*) FROM {}.history").format(sql.Identifier(schema)))
    )


LINE = (
    "{label:>12} | load {load_before:4.1f}->{load_after:4.1f} | "
    "server {server_cpu_ms_per_run_start:.3f} ms/start | {runs_per_s:6.0f} runs/s "
    "{steps_per_s:6.0f} steps/s | server {server_cpu_ms_per_step:.3f} ms/step "
    "({server_vcpus_busy:.2f} vCPU) | workers {worker_cpu_ms_per_step:.3f} ms/step | WAL "
    "{wal_bytes_per_step:5.0f} B/step, {wal_bytes_per_run_start:5.0f} B/start, "
    "{fpi_per_step:.3f} FPI/step | {commits_per_step:.3f} commits/step | connections per "
    "worker busy most {busy_connections_most:.0f} mean {busy_connections_mean:.1f}"
)

KEYS = (
    "server_cpu_ms_per_run_start",
    "runs_per_s",
    "steps_per_s",
    "server_cpu_ms_per_step",
    "server_vcpus_busy",
    "worker_cpu_ms_per_step",
    "wal_bytes_per_step",
    "wal_bytes_per_run_start",
    "wal_bytes_per_step_all_in",
    "fpi_per_step",
    "commits_per_step",
    "busy_connections_most",
    "busy_connections_mean",
    "load_before",
    "load_after",
)


def medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each figure over ``rows`` (figures the server could not give left out)."""
    found: dict[str, float] = {}
    for key in KEYS:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            found[key] = statistics.median(values)
    return found


def summary(label: str, rows: list[dict[str, Any]], idle: dict[str, Any], hist: int) -> str:
    """The median figures of one schema, and what they mean per vCPU."""
    m = medians(rows)
    per_server_vcpu = 1000 / m["server_cpu_ms_per_step"] if "server_cpu_ms_per_step" in m else 0
    per_worker_vcpu = 1000 / m["worker_cpu_ms_per_step"]
    run_ms = m.get("server_cpu_ms_per_run_start", 0) + STEPS * m.get("server_cpu_ms_per_step", 0)
    runs_per_vcpu = 1000 / run_ms if run_ms > 0 else 0
    loads = [r["load_before"] for r in rows] + [r["load_after"] for r in rows]
    return (
        f"{label} ({hist:,} history rows at the end; median of {len(rows)}; load average "
        f"{min(loads):.1f} to {max(loads):.1f}):\n"
        f"  {m['runs_per_s']:.0f} runs/s, {m['steps_per_s']:.0f} steps/s on this machine\n"
        f"  server CPU {m.get('server_cpu_ms_per_step', float('nan')):.3f} ms per step "
        f"= {per_server_vcpu:,.0f} steps/s per fully used server vCPU "
        f"({m.get('server_vcpus_busy', float('nan')):.2f} vCPU busy in the window)\n"
        f"  server CPU {m.get('server_cpu_ms_per_run_start', float('nan')):.3f} ms per run "
        f"started (App.start_async, 50 at a time) = {runs_per_vcpu:,.0f} {STEPS}-step runs/s "
        f"per fully used server vCPU, starts included\n"
        f"  worker CPU {m['worker_cpu_ms_per_step']:.3f} ms per step "
        f"= {per_worker_vcpu:,.0f} steps/s per worker vCPU\n"
        f"  WAL {m['wal_bytes_per_step']:.0f} bytes per step executed, "
        f"{m['wal_bytes_per_run_start']:.0f} per run started, "
        f"{m['wal_bytes_per_step_all_in']:.0f} per step all in "
        f"({m.get('fpi_per_step', float('nan')):.3f} full-page images per step)\n"
        f"  {m['commits_per_step']:.3f} commits per step\n"
        f"  connections per worker (listener included): idle most "
        f"{idle['idle_connections_most']:.0f} mean {idle['idle_connections_mean']:.2f}; "
        f"busy most {m['busy_connections_most']:.0f} mean {m['busy_connections_mean']:.2f}\n"
        f"  one idle worker's connections: {'; '.join(idle['idle_kinds'])}"
    )


def main() -> None:
    """Measure both schemas, alternating, and print every repetition and the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--history-rows", type=int, default=1_000_000)
    parser.add_argument("--settle", type=float, default=45.0)
    parser.add_argument("--json", type=Path, default=None)

    def connections(args: argparse.Namespace) -> int:
        return 4 * 2 * args.workers + 50 if args.workers > 20 else 200

    with standalone(parser, connections) as (args, server, probe):
        version = probe.query_one("SELECT current_setting('server_version')")
        print(
            f"PostgreSQL {version}; {os.cpu_count()} cores; {args.workers} worker(s) per schema, "
            f"concurrency {args.concurrency}; {args.runs} runs of {STEPS} steps per repetition"
        )
        schemas = {"empty": f"bench_{uuid.uuid4().hex[:8]}"}
        if args.history_rows > 0:
            runs = max(args.history_rows // 6, 1)
            print(f"generating {runs:,} runs with about {args.history_rows:,} history rows ...")
            started = time.monotonic()
            schemas["history"] = generate(server.url, runs).schema
            print(f"generated in {time.monotonic() - started:.0f} s")
        with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
            fleets: dict[str, Fleet] = {}
            try:
                for label, schema in schemas.items():
                    fleets[label] = Fleet(
                        server.url, schema, args.workers, args.concurrency, Path(folder)
                    )
                for fleet in fleets.values():
                    fleet.ready(probe)
                settle_server(probe, schemas.values())
                for label, fleet in fleets.items():
                    # One repetition not counted: the first changes of each page
                    # after the checkpoint write full-page images.
                    row = measure(probe, fleet, args.runs)
                    print(LINE.format(label=f"({label})", **_printable(row)))
                hist_before = {label: history_rows(probe, s) for label, s in schemas.items()}
                rows: dict[str, list[dict[str, Any]]] = {label: [] for label in fleets}
                for _ in range(args.repeat):
                    for label, fleet in fleets.items():
                        row = measure(probe, fleet, args.runs)
                        rows[label].append(row)
                        print(LINE.format(label=f"{label}", **_printable(row)))
                # An idle pool closes one connection per 10 s without use.
                print(f"idle for {args.settle:.0f} s ...")
                time.sleep(args.settle)
                idle = {label: idle_connections(probe, fleet) for label, fleet in fleets.items()}
                print()
                for label, schema in schemas.items():
                    rows_now = history_rows(probe, schema)
                    print(summary(label, rows[label], idle[label], rows_now))
                    print(f"  ({hist_before[label]:,} history rows before the first repetition)")
                if args.json:
                    args.json.write_text(
                        json.dumps(
                            {"rows": rows, "idle": idle, "history_rows": hist_before}, indent=1
                        )
                    )
            finally:
                for fleet in fleets.values():
                    fleet.stop()
                for schema in schemas.values():
                    drop_schema(probe, schema)


def _printable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (float("nan") if v is None else v) for k, v in row.items()}


if __name__ == "__main__":
    main()
