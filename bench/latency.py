"""Wake-up latency with an idle worker: start -> first step, signal -> continue.

Usage: python bench/latency.py [--samples N] [--workers 1] [--settle 3] [--database-url URL]
       python bench/latency.py --curve 1 20 100 [--samples N] [--timers N] [--delay 0.5]

``--workers`` `perdure worker` processes (bench_app.py, default one) serve; one
run at a time, so the workers are idle each time (with many, a NOTIFY must
not send all of them racing for the one task):
  - start -> first step: from just before ``app.start()`` to the moment the
    first step function begins (it returns ``time.time()``);
  - signal -> continue: from just before ``app.signal()`` to the moment the
    step after ``ctx.wait_for_signal()`` begins.
The fleet first settles for ``--settle`` seconds (its start-up, and the
first heartbeats that give each worker its place in the fleet). Both clocks
are this machine's. Prints p50/p99 and the number of samples,
and the CPU the workers and the server spent per start (from /proc: what a
notification costs a fleet, the herd included), less what the fleet and the
server burn idle over as long (measured over 10 s before the starts).

``--curve`` measures fleets of each size in turn on one server (of its own,
allowing 4 connections per worker of the largest fleet and 50 more), each
settled for ``--settle`` s, and prints the wake-up curve: start -> first
step p50 and the CPU per start, and the same for due timers: ``--timers``
runs started together, the first with ``delay=--delay`` and each next due
50 ms after it, from the moment each was due (the start's time plus the
delay) to its first step. Each figure is also given
as a ratio to the first fleet's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import (
    Probe,
    WorkerProcess,
    drop_schema,
    process_cpu_seconds,
    quantile,
    server_cpu_seconds,
    standalone,
)

import perdure


def measure(
    url: str,
    probe: Probe,
    samples: int,
    workers: int = 1,
    settle: float = 3.0,
    timers: int = 0,
    delay: float = 0.5,
    quiet: float = 10.0,
) -> dict[str, Any]:
    """Both latencies over ``samples`` runs each, in ms, on a fresh schema, once the
    fleet has settled for ``settle`` s; with ``timers``, as many runs due ``delay`` s
    after their start, from due to first step, and their CPU."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        fleet = [
            WorkerProcess(url, schema, 4, Path(folder) / f"worker{i}.json") for i in range(workers)
        ]
        try:
            for worker in fleet:
                worker.wait_ready(probe, timeout=600)
            app.start("bench_first").result(timeout=60)  # warm: connected, prepared
            time.sleep(settle)
            # What the idle fleet and the server burn anyway (heartbeats, the
            # wakeup threads' ticks), per second: taken off the CPU per start.
            idle = _cpu_now(fleet, probe)
            time.sleep(quiet)
            idle = tuple((b - a) / quiet for a, b in zip(idle, _cpu_now(fleet, probe), strict=True))
            began, before = time.monotonic(), _cpu_now(fleet, probe)
            starts = [_start_once(app) for _ in range(samples)]
            fleet_cpu, server_cpu = _spent(fleet, probe, before, began, idle)
            signals = [_signal_once(app) for _ in range(samples)]
            began, before = time.monotonic(), _cpu_now(fleet, probe)
            due = _due_many(app, delay, timers)
            timer_cpu, timer_server = _spent(fleet, probe, before, began, idle)
        finally:
            for worker in fleet:
                worker.stop()
    app.close()
    drop_schema(probe, schema)
    return {
        "start_p50_ms": _ms(quantile(starts, 0.5)),
        "start_p99_ms": _ms(quantile(starts, 0.99)),
        "signal_p50_ms": _ms(quantile(signals, 0.5)),
        "signal_p99_ms": _ms(quantile(signals, 0.99)),
        "fleet_cpu_ms_per_start": fleet_cpu * 1000 / samples,
        "server_cpu_ms_per_start": None if server_cpu is None else server_cpu * 1000 / samples,
        "samples": samples,
        "workers": workers,
        "timer_p50_ms": _ms(quantile(due, 0.5)),
        "timer_fleet_cpu_ms": timer_cpu * 1000 / timers if timers else None,
        "timer_server_cpu_ms": (
            timer_server * 1000 / timers if timers and timer_server is not None else None
        ),
    }


def _cpu_now(fleet: list[WorkerProcess], probe: Probe) -> tuple[float, float]:
    """CPU seconds so far: the fleet's processes, and the server's (0 if unknown)."""
    workers = sum(process_cpu_seconds(w.process.pid) for w in fleet)
    return workers, server_cpu_seconds(probe) or 0.0


def _spent(
    fleet: list[WorkerProcess],
    probe: Probe,
    before: tuple[float, float],
    began: float,
    idle: tuple[float, ...],
) -> tuple[float, float]:
    """CPU seconds the fleet and the server spent since ``before`` (at ``began``),
    less what they burn idle over as long (``idle``: per second)."""
    after, seconds = _cpu_now(fleet, probe), time.monotonic() - began
    return (
        after[0] - before[0] - idle[0] * seconds,
        after[1] - before[1] - idle[1] * seconds,
    )


#: Between the due times of the timers of one measure: far longer than a
#: wake-up, so each finds the fleet idle, and short, so that the idle fleet's
#: CPU (heartbeats), subtracted over the measure, is not larger than theirs.
TIMER_SPACING = 0.05


def _due_many(app: perdure.App, delay: float, count: int) -> list[float]:
    """From when each of ``count`` runs started ahead is due to its first step (the
    start's round trip included: the server stamps the due time a moment after
    ``before``): the first due ``delay`` s ahead, the others TIMER_SPACING apart."""
    handles = []
    for i in range(count):
        ahead = delay + i * TIMER_SPACING
        handles.append((time.time() + ahead, app.start("bench_first", delay=ahead)))
    return [float(handle.result(timeout=30)) - due for due, handle in handles]


def _start_once(app: perdure.App) -> float:
    before = time.time()
    began = float(app.start("bench_first").result(timeout=30))
    return began - before


def _signal_once(app: perdure.App) -> float:
    handle = app.start("bench_signal")
    deadline = time.monotonic() + 30
    while handle.status() != perdure.RunStatus.WAITING:
        if time.monotonic() > deadline:
            raise RuntimeError("the run did not reach its signal wait within 30 s")
        time.sleep(0.001)
    before = time.time()
    app.signal(handle.id, "go")
    return float(handle.result(timeout=30)) - before


def _cpu(ms: float | None) -> str:
    return "unknown (not on this machine)" if ms is None else f"{ms:.2f} ms"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _curve(url: str, probe: Probe, args: argparse.Namespace) -> None:
    """Measure each fleet size of ``args.curve`` and print the curve, with ratios to the first."""
    allowed = probe.query_one("SELECT current_setting('max_connections')::int")
    version = probe.query_one("SELECT current_setting('server_version')")
    print(f"PostgreSQL {version}, max_connections {allowed}")
    rows = [
        measure(url, probe, args.samples, n, args.settle, args.timers, args.delay)
        for n in args.curve
    ]
    first = rows[0]

    def cpu(f: dict[str, Any], prefix: str) -> float:
        if prefix:
            return float(f["timer_fleet_cpu_ms"] or 0) + float(f["timer_server_cpu_ms"] or 0)
        return float(f["fleet_cpu_ms_per_start"]) + float(f["server_cpu_ms_per_start"] or 0)

    print("workers | start p50 ms (x) | CPU/start ms w+s (x) | timer p50 ms (x) | CPU/timer ms (x)")
    for f in rows:
        print(
            f"{f['workers']:7d} | {f['start_p50_ms']:.2f} "
            f"({f['start_p50_ms'] / first['start_p50_ms']:.2f}) | "
            f"{f['fleet_cpu_ms_per_start']:.2f}+{f['server_cpu_ms_per_start'] or 0:.2f} "
            f"({cpu(f, '') / cpu(first, ''):.2f}) | "
            f"{f['timer_p50_ms'] or 0:.2f} "
            f"({(f['timer_p50_ms'] or 0) / (first['timer_p50_ms'] or 1):.2f}) | "
            f"{f['timer_fleet_cpu_ms'] or 0:.2f}+{f['timer_server_cpu_ms'] or 0:.2f} "
            f"({cpu(f, 't') / (cpu(first, 't') or 1):.2f})"
        )


def main() -> None:
    """Measure and print both latencies (or, with --curve, the wake-up curve)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--curve", type=int, nargs="+", default=None, help="fleet sizes")
    parser.add_argument("--timers", type=int, default=30, help="runs due later, with --curve")
    parser.add_argument("--delay", type=float, default=0.5, help="their delay, with --curve")

    def connections(args: argparse.Namespace) -> int:
        return 4 * max(args.curve or [args.workers]) + 50 if args.curve else 200

    with standalone(parser, connections) as (args, server, probe):
        if args.curve:
            _curve(server.url, probe, args)
            return
        f = measure(server.url, probe, args.samples, args.workers, args.settle)
        print(
            f"start  -> first step: p50 {f['start_p50_ms']:.2f} ms  "
            f"p99 {f['start_p99_ms']:.2f} ms\n"
            f"signal -> continue  : p50 {f['signal_p50_ms']:.2f} ms  "
            f"p99 {f['signal_p99_ms']:.2f} ms  (n={args.samples} each, {args.workers} worker(s))\n"
            f"CPU per start: workers {f['fleet_cpu_ms_per_start']:.2f} ms, "
            f"server {_cpu(f['server_cpu_ms_per_start'])}"
        )


if __name__ == "__main__":
    main()
