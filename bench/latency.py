"""Wake-up latency with an idle worker: start -> first step, signal -> continue.

Usage: python bench/latency.py [--samples N] [--workers 1] [--settle 3] [--database-url URL]

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
notification costs a fleet, the herd included).
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
    url: str, probe: Probe, samples: int, workers: int = 1, settle: float = 3.0
) -> dict[str, Any]:
    """Both latencies over ``samples`` runs each, in ms, on a fresh schema, once the
    fleet has settled for ``settle`` s."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        fleet = [
            WorkerProcess(url, schema, 4, Path(folder) / f"worker{i}.json") for i in range(workers)
        ]
        try:
            for worker in fleet:
                worker.wait_ready(probe)
            app.start("bench_first").result(timeout=60)  # warm: connected, prepared
            time.sleep(settle)
            fleet_cpu = sum(process_cpu_seconds(w.process.pid) for w in fleet)
            server_cpu = server_cpu_seconds(probe)
            starts = [_start_once(app) for _ in range(samples)]
            fleet_cpu = sum(process_cpu_seconds(w.process.pid) for w in fleet) - fleet_cpu
            if server_cpu is not None:
                server_cpu = (server_cpu_seconds(probe) or 0.0) - server_cpu
            signals = [_signal_once(app) for _ in range(samples)]
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
    }


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


def main() -> None:
    """Measure and print both latencies."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--settle", type=float, default=3.0)
    with standalone(parser) as (args, server, probe):
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
