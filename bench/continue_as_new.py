"""Continue-as-new: an entity loop that lives forever keeps a flat cost per iteration.

Usage: python bench/continue_as_new.py [--iterations N] [--every K] [--database-url URL] [--keep]

One run of workflow ``bench_entity`` loops N times (default 10,000; the
headline figure is 100,000), one step per iteration, and continues as new
every K iterations (default 1,000): a chain of N / K runs. It prints, for the
first, middle and last runs of the chain and for each tenth of it, the time
per iteration (the run's start to its continuation, over its iterations) and
the rows of history each run holds (``steps`` and ``history``). The curve is
flat when a run's cost does not grow with the chain behind it. A worker runs
in this process; without --database-url the embedded server is used, like
the other scripts here.

Wall time per iteration follows the machine's load as much as the chain, so
each tenth also shows the CPU time this process (worker and client) spent
per iteration, and the 1-minute load average while its runs went: a cost
that grew with the chain would raise the CPU column too. ``--per-run``
prints the same for every run.
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg

import perdure
from perdure import testing

CHAIN = """
SELECT r.id, r.started_at, r.completed_at, r.continued_from,
       (SELECT count(*) FROM {s}.steps s WHERE s.run_id = r.id) AS steps,
       (SELECT count(*) FROM {s}.history h WHERE h.run_id = r.id) AS history
FROM {s}.runs r WHERE r.workflow = 'bench_entity'
"""


def _inc(n: int) -> int:
    return n + 1


def build(url: str, schema: str) -> perdure.App:
    """An App on ``schema`` with the entity workflow."""
    app = perdure.App(url, schema=schema)

    @app.workflow("bench_entity")
    async def bench_entity(ctx: perdure.Context, state: dict[str, Any]) -> int:
        n = state["n"]
        for _ in range(state["every"]):
            if n >= state["until"]:
                return n
            n = await ctx.step("inc", _inc, n)
        await ctx.continue_as_new({**state, "n": n})
        return -1  # never reached

    return app


def chain(url: str, schema: str) -> list[dict[str, Any]]:
    """The runs of the chain, first to last, with their timings and history rows."""
    with psycopg.connect(url) as conn:
        cursor = conn.execute(CHAIN.format(s=f'"{schema}"'))
        names = [c.name for c in cursor.description or ()]
        found = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    after = {r["continued_from"]: r for r in found}
    ordered = [next(r for r in found if r["continued_from"] is None)]
    while ordered[-1]["id"] in after:
        ordered.append(after[ordered[-1]["id"]])
    return ordered


def per_iteration_us(run: dict[str, Any]) -> float:
    """Microseconds per iteration of one run: its start to its end, over its steps."""
    took = (run["completed_at"] - run["started_at"]).total_seconds()
    return took / max(run["steps"], 1) * 1e6


class Sampler:
    """Samples (wall time, this process's CPU time, 1-minute load) every 0.2 s on a thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.samples.append((time.time(), time.process_time(), os.getloadavg()[0]))

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def _at(self, wall: float) -> tuple[float, float]:
        """CPU seconds and load at wall time ``wall`` (the nearest sample before it)."""
        i = max(bisect.bisect_right([s[0] for s in self.samples], wall) - 1, 0)
        return self.samples[i][1], self.samples[i][2]

    def of(self, run: dict[str, Any]) -> tuple[float, float]:
        """Microseconds of CPU per iteration of ``run``, and the mean load while it ran."""
        start, end = run["started_at"].timestamp(), run["completed_at"].timestamp()
        cpu = self._at(end)[0] - self._at(start)[0]
        loads = [s[2] for s in self.samples if start <= s[0] <= end] or [self._at(end)[1]]
        return cpu / max(run["steps"], 1) * 1e6, statistics.mean(loads)


def main() -> None:
    """Run the chain, print the curve; drop the schema unless --keep."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the schema.")
    parser.add_argument("--per-run", action="store_true", help="Print every run too.")
    args = parser.parse_args()
    url = perdure.App(args.database_url).url
    schema = f"bench_can_{uuid.uuid4().hex[:8]}"
    app = build(url, schema)
    app.ensure_schema()
    try:
        sampler = Sampler()
        started = time.perf_counter()
        handle = app.start("bench_entity", {"n": 0, "every": args.every, "until": args.iterations})
        testing.drain(app)
        total = time.perf_counter() - started
        sampler.stop()
        assert handle.result(timeout=60) == args.iterations
        runs = chain(url, schema)
        print(
            f"{args.iterations:,} iterations, continuing every {args.every:,}: "
            f"{len(runs)} runs in {total:.1f} s ({total / args.iterations * 1e6:.0f} us/iteration)"
        )
        print(f"{'run':>6} {'us/iteration':>13} {'steps rows':>11} {'history rows':>13}")
        picks = {"first": 0, "middle": len(runs) // 2, "last": len(runs) - 2}
        for label, i in picks.items():
            r = runs[max(i, 0)]
            print(f"{label:>6} {per_iteration_us(r):13.0f} {r['steps']:11d} {r['history']:13d}")
        full = [r for r in runs if r["steps"] == args.every]
        tenth = max(len(full) // 10, 1)
        print("curve, per tenth of the chain (full runs only):")
        print(
            f"{'tenth':>6} {'runs':>9} {'us/iteration':>13} {'min..max':>13} "
            f"{'cpu us/iter':>12} {'load':>5} {'history rows/run':>17}"
        )
        for k, i in enumerate(range(0, len(full), tenth), start=1):
            part = full[i : i + tenth]
            each = [per_iteration_us(r) for r in part]
            cpu, load = zip(*(sampler.of(r) for r in part), strict=True)
            rows = [r["history"] for r in part]
            print(
                f"{k:>6} {f'{i + 1}-{i + len(part)}':>9} {statistics.mean(each):13.0f} "
                f"{f'{min(each):.0f}..{max(each):.0f}':>13} {statistics.mean(cpu):12.0f} "
                f"{statistics.mean(load):5.1f} "
                f"{f'{min(rows)}..{max(rows)}' if min(rows) != max(rows) else str(rows[0]):>17}"
            )
        if args.per_run:
            print(f"{'run':>6} {'us/iteration':>13} {'cpu us/iter':>12} {'load':>5}")
            for i, r in enumerate(full, start=1):
                cpu_us, load_avg = sampler.of(r)
                print(f"{i:>6} {per_iteration_us(r):13.0f} {cpu_us:12.0f} {load_avg:5.1f}")
        print(f"history rows per run: max {max(r['history'] for r in runs)} (all runs)")
    finally:
        app.close()
        if not args.keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
