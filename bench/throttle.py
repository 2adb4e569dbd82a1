"""Cost of one claim from a throttled queue, next to the plain claim, with a backlog.

Usage: python bench/throttle.py [--backlog N] [--keys K] [--samples S] [--database-url URL]

Fills three queues with N ready tasks each (generate_series, one statement):
  - "plain":  no settings (task_claim, one statement, no lock);
  - "parted": partition_concurrency=1, K keys, and the first half of the
    backlog is one hot key whose one slot is taken (the claim passes over it);
  - "rated":  rate_limit=(1000000, 60) for the whole queue.
Then times S claims of one task each from each queue, every claim in a
transaction that is rolled back, so the queue is the same for every sample.
Prints the median and p90 in milliseconds. The database is the embedded one
unless --database-url (or PERDURE_DATABASE_URL) names another; a schema of
its own is made and dropped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import psycopg
from psycopg.rows import dict_row

import perdure
from perdure.store.store import execute_sync

WORKFLOW = "bench_throttle"


def fill(conn: psycopg.Connection, schema: str, queue: str, backlog: int, keys: int) -> None:
    """``backlog`` ready tasks (and their runs) in ``queue``; keyed when ``keys``."""
    key = (
        "NULL"
        if not keys
        else f"CASE WHEN g <= {backlog // 2} THEN 'hot' ELSE 'k' || (g %% {keys}) END"
    )
    conn.execute(
        f"""
        WITH runs AS (
            INSERT INTO {schema}.runs (id, workflow, version, queue, status, input, created_at,
                                       updated_at, partition_key)
            SELECT gen_random_uuid(), %(wf)s, 1, %(queue)s, 'queued', 'null', now(), now(), {key}
            FROM generate_series(1, %(n)s) g
            RETURNING id, partition_key
        )
        INSERT INTO {schema}.tasks (run_id, queue, workflow, version, status, available_at,
                                    created_at, partition_key)
        SELECT id, %(queue)s, %(wf)s, 1, 'ready', now() - interval '1 hour', now(), partition_key
        FROM runs
        """,
        {"wf": WORKFLOW, "queue": queue, "n": backlog},
    )


def time_claims(app: perdure.App, url: str, queue: str, samples: int) -> list[float]:
    """Seconds per claim of one task from ``queue`` (lock + claim, rolled back)."""
    statements = app.statements
    spent = []
    with psycopg.connect(url, row_factory=dict_row) as conn:
        for _ in range(samples):
            began = time.perf_counter()
            with conn.transaction(force_rollback=True):
                locks = execute_sync(conn, statements.queues.lock([queue]))
                throttled = any(flag for _, flag in locks)
                claimed = execute_sync(
                    conn,
                    statements.tasks.claim(
                        worker_id="bench",
                        queues=[queue],
                        names=[WORKFLOW],
                        versions=[1],
                        limit=1,
                        lease_seconds=30,
                        locked=[name for name, _ in locks],
                        throttled=throttled,
                    ),
                )
            spent.append(time.perf_counter() - began)
            assert len(claimed) == 1, f"{queue}: claimed {len(claimed)}"
    return spent


def main() -> None:
    """Fill, measure and print."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--database-url", default=os.environ.get("PERDURE_DATABASE_URL"))
    args = parser.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    app = perdure.App(args.database_url, schema=schema)
    try:
        app.ensure_schema()
        url = app.url
        app.set_queue("parted", partition_concurrency=1)
        app.set_queue("rated", rate_limit=(1_000_000, 60))
        with psycopg.connect(url, autocommit=True) as conn:
            fill(conn, schema, "plain", args.backlog, 0)
            fill(conn, schema, "parted", args.backlog, args.keys)
            fill(conn, schema, "rated", args.backlog, 0)
            # The hot key's one slot is taken: its backlog is passed over.
            conn.execute(
                f"UPDATE {schema}.tasks SET status = 'claimed', worker_id = 'other' "
                f"WHERE id = (SELECT min(id) FROM {schema}.tasks WHERE partition_key = 'hot')"
            )
            conn.execute(f"ANALYZE {schema}.tasks")
        print(
            f"backlog {args.backlog} ready tasks per queue, {args.keys} keys, "
            f"{args.samples} claims each (ms)"
        )
        for queue in ("plain", "parted", "rated"):
            spent = sorted(time_claims(app, url, queue, args.samples))
            p90 = spent[int(0.9 * len(spent))] * 1000
            print(f"  {queue:7s} median {statistics.median(spent) * 1000:7.2f}  p90 {p90:7.2f}")
    finally:
        with psycopg.connect(app.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        app.close()


if __name__ == "__main__":
    main()
