"""Wake-up latency with an idle worker: start -> first step, signal -> continue.

Usage: python bench/latency.py [--samples N] [--workers 1] [--database-url URL]

``--workers`` `perdure worker` processes (bench_app.py, default one) serve; one
run at a time, so the workers are idle each time (with many, a NOTIFY must
not send all of them racing for the one task):
  - start -> first step: from just before ``app.start()`` to the moment the
    first step function begins (it returns ``time.time()``);
  - signal -> continue: from just before ``app.signal()`` to the moment the
    step after ``ctx.wait_for_signal()`` begins.
Both clocks are this machine's. Prints p50/p99 and the number of samples.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import Probe, WorkerProcess, drop_schema, quantile, standalone

import perdure


def measure(url: str, probe: Probe, samples: int, workers: int = 1) -> dict[str, Any]:
    """Both latencies over ``samples`` runs each, in ms, on a fresh schema."""
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
            starts = [_start_once(app) for _ in range(samples)]
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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def main() -> None:
    """Measure and print both latencies."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    with standalone(parser) as (args, server, probe):
        f = measure(server.url, probe, args.samples, args.workers)
        print(
            f"start  -> first step: p50 {f['start_p50_ms']:.2f} ms  "
            f"p99 {f['start_p99_ms']:.2f} ms\n"
            f"signal -> continue  : p50 {f['signal_p50_ms']:.2f} ms  "
            f"p99 {f['signal_p99_ms']:.2f} ms  (n={args.samples} each, {args.workers} worker(s))"
        )


if __name__ == "__main__":
    main()
