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
"""

from __future__ import annotations

import argparse
import statistics
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


def main() -> None:
    """Run the chain, print the curve; drop the schema unless --keep."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the schema.")
    args = parser.parse_args()
    url = perdure.App(args.database_url).url
    schema = f"bench_can_{uuid.uuid4().hex[:8]}"
    app = build(url, schema)
    app.ensure_schema()
    try:
        started = time.perf_counter()
        handle = app.start("bench_entity", {"n": 0, "every": args.every, "until": args.iterations})
        testing.drain(app)
        total = time.perf_counter() - started
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
            f"{'tenth':>6} {'runs':>11} {'us/iteration':>13} {'min..max':>13} "
            f"{'history rows/run':>17}"
        )
        for k, i in enumerate(range(0, len(full), tenth), start=1):
            part = full[i : i + tenth]
            each = [per_iteration_us(r) for r in part]
            rows = [r["history"] for r in part]
            print(
                f"{k:>6} {f'{i + 1}-{i + len(part)}':>11} {statistics.mean(each):13.0f} "
                f"{f'{min(each):.0f}..{max(each):.0f}':>13} "
                f"{f'{min(rows)}..{max(rows)}' if min(rows) != max(rows) else str(rows[0]):>17}"
            )
        print(f"history rows per run: max {max(r['history'] for r in runs)} (all runs)")
    finally:
        app.close()
        if not args.keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
