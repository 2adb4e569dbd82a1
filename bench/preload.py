"""Preload finished runs with COPY: the history a long-lived installation carries.

Usage: python bench/preload.py --schema S [--runs 100000] [--database-url URL]

Each preloaded run is a completed 3-step run of workflow ``bench_preloaded``
with its three step checkpoints and six history rows (created, claimed,
three step completions, completed), written with COPY in the perdure
schema ``S`` (migrated first), then VACUUMed and ANALYZEd, as autovacuum
leaves a long-lived installation. Claims must not slow down:
they read the partial index of ready tasks, which holds none of these.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

import perdure

STEPS = ("a", "b", "c")


def preload(url: str, schema: str, runs: int) -> float:
    """Write ``runs`` finished runs into ``schema``; seconds it took."""
    perdure.App(url, schema=schema).ensure_schema()
    started = time.perf_counter()
    base = datetime.now(UTC) - timedelta(days=30)
    with psycopg.connect(url) as conn:
        ids = [uuid.uuid4() for _ in range(runs)]
        table = sql.Identifier
        with conn.cursor() as cur:
            columns = "(id, workflow, version, queue, status, input, output, created_at, "
            columns += "started_at, completed_at, updated_at)"
            copy = sql.SQL("COPY {}.{} " + columns + " FROM STDIN")
            with cur.copy(copy.format(table(schema), table("runs"))) as out:
                for n, run_id in enumerate(ids):
                    at = base + timedelta(milliseconds=n)
                    out.write_row(
                        (
                            run_id,
                            "bench_preloaded",
                            1,
                            "bench_preloaded",
                            "completed",
                            "null",
                            "3",
                            at,
                            at,
                            at,
                            at,
                        )
                    )
            copy = sql.SQL(
                "COPY {}.{} (run_id, position, name, kind, status, attempts, output, "
                "started_at, completed_at) FROM STDIN"
            )
            with cur.copy(copy.format(table(schema), table("steps"))) as out:
                for n, run_id in enumerate(ids):
                    at = base + timedelta(milliseconds=n)
                    for position, name in enumerate(STEPS):
                        out.write_row((run_id, position, name, "step", "completed", 1, "1", at, at))
            copy = sql.SQL(
                "COPY {}.{} (run_id, at, event, step_position, step_name, detail) FROM STDIN"
            )
            events = [("run_created", None, None), ("run_claimed", None, None)]
            events += [("step_completed", p, name) for p, name in enumerate(STEPS)]
            events += [("run_completed", None, None)]
            detail = json.dumps({"workflow": "bench_preloaded"})
            with cur.copy(copy.format(table(schema), table("history"))) as out:
                for n, run_id in enumerate(ids):
                    at = base + timedelta(milliseconds=n)
                    for event, position, name in events:
                        out.write_row((run_id, at, event, position, name, detail))
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        for name in ("runs", "steps", "history", "tasks"):
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(table(schema), table(name)))
    return time.perf_counter() - started


def main() -> None:
    """Preload and say how long it took."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--schema", required=True)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--database-url", required=True)
    args = parser.parse_args()
    seconds = preload(args.database_url, args.schema, args.runs)
    print(f"{args.runs} finished runs written to {args.schema} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
