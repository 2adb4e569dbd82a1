"""Update latency: from a client's ``app.update()`` to its reply, with an idle worker,
and with the worker busy with the three-step workload.

Usage: python bench/updates.py [--samples N] [--load RUNS] [--per-run N] [--database-url URL]

One ``perdure worker`` process (bench_app.py, concurrency 4) serves runs of
``bench_updates`` that wait for a signal; each sample sends update ``bump``
(its handler runs one no-op step and returns the payload) and waits for the
reply, one at a time, ``--per-run`` of them (default 1) to each run: a
replay applies every update a run took so far again, so the cost of one
grows with the number before it. The idle series runs first; then, with ``--load`` > 0,
that many ``bench_noop3`` runs are started at once and the same series is
measured while the worker works through them. Prints p50/p99 in ms.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from harness import Probe, WorkerProcess, drop_schema, quantile, standalone

import perdure


def _waiting(app: perdure.App) -> str:
    """A new run of ``bench_updates`` once it waits; its id."""
    handle = app.start("bench_updates")
    deadline = time.monotonic() + 30
    while handle.status() != perdure.RunStatus.WAITING:
        if time.monotonic() > deadline:
            raise RuntimeError("the run did not reach its wait within 30 s")
        time.sleep(0.002)
    return handle.id


def series(app: perdure.App, samples: int, per_run: int) -> list[float]:
    """``samples`` update round trips, ``per_run`` to each run (a new one waiting), in s."""
    took = []
    run_id = ""
    for i in range(samples):
        if i % per_run == 0:
            run_id = _waiting(app)
        before = time.perf_counter()
        if app.update(run_id, "bump", i, timeout=30) != i:
            raise RuntimeError("the update answered another payload")
        took.append(time.perf_counter() - before)
    return took


def measure(
    url: str, probe: Probe, samples: int, load: int, per_run: int
) -> dict[str, float | int | None]:
    """Both series on a fresh schema."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    with tempfile.TemporaryDirectory(prefix="perdure-bench-stats-") as folder:
        worker = WorkerProcess(url, schema, 4, Path(folder) / "worker.json")
        try:
            worker.wait_ready(probe)
            series(app, 10, 10)  # warm: connected, statements prepared
            idle = series(app, samples, per_run)
            loaded: list[float] = []
            if load:
                app.start_many("bench_noop3", [None] * load)
                loaded = series(app, samples, per_run)
        finally:
            worker.stop()
    app.close()
    drop_schema(probe, schema)
    return {
        "idle_p50_ms": quantile(idle, 0.5) * 1000,
        "idle_p99_ms": quantile(idle, 0.99) * 1000,
        "loaded_p50_ms": quantile(loaded, 0.5) * 1000 if loaded else None,
        "loaded_p99_ms": quantile(loaded, 0.99) * 1000 if loaded else None,
        "samples": samples,
        "load": load,
    }


def main() -> None:
    """Measure and print the update latencies."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--per-run", type=int, default=1)
    with standalone(parser) as (args, server, probe):
        found = measure(server.url, probe, args.samples, args.load, args.per_run)
        print(
            f"update -> reply, idle worker: p50 {found['idle_p50_ms']:.2f} ms  "
            f"p99 {found['idle_p99_ms']:.2f} ms  (n={args.samples}, "
            f"{args.per_run} per run)"
        )
        if found["loaded_p50_ms"] is not None:
            print(
                f"update -> reply, {args.load} bench_noop3 runs started at once: "
                f"p50 {found['loaded_p50_ms']:.2f} ms  p99 {found['loaded_p99_ms']:.2f} ms"
            )


if __name__ == "__main__":
    main()
