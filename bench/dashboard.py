"""How long the dashboard's pages take with many finished runs behind them.

Usage: python bench/dashboard.py [--runs 1000000] [--database-url URL]

Fills a schema of its own (bench_dashboard, dropped first) with N runs spread
over 30 days (92 % completed, 5 % failed, 2 % cancelled, the rest live; five
workflows, two versions, twenty workers, a key and a customer tag each, a
thousand runs per customer) and two steps per run,
with one INSERT ... SELECT each, then ANALYZE. Then it requests each page
through the ASGI app in this process (no network), once to warm up and 7
times, and prints the median and the slowest time of each. Without
--database-url it starts a throwaway embedded PostgreSQL in /tmp.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from starlette.testclient import TestClient

import perdure
from perdure.dashboard import DashboardConfig, create_app

SCHEMA = "bench_dashboard"
WORKFLOWS = ("checkout", "refund", "signup", "nightly_etl", "report")

FILL_RUNS = """
INSERT INTO {runs} (id, workflow, version, queue, key, status, input, output, error, worker_id,
                    tags, created_at, started_at, completed_at, updated_at)
SELECT gen_random_uuid(), w, 1 + (i %% 2), w, 'order:' || i,
       CASE WHEN i %% 100 < 92 THEN 'completed' WHEN i %% 100 < 97 THEN 'failed'
            WHEN i %% 100 < 99 THEN 'cancelled' ELSE 'queued' END,
       jsonb_build_object('order_id', i), '{{"ok": true}}'::jsonb,
       CASE WHEN i %% 100 BETWEEN 92 AND 96
            THEN '{{"type": "Gateway", "message": "timeout"}}'::jsonb END,
       'worker-' || (i %% 20),
       jsonb_build_object('customer', 'c' || (i %% (%(n)s / 1000 + 1))),
       t, t + interval '20 ms', t + interval '900 ms', t + interval '900 ms'
FROM (SELECT i, (ARRAY{workflows})[1 + i %% 5] AS w,
             now() - (%(n)s - i) * (interval '30 days' / %(n)s) AS t
      FROM generate_series(1, %(n)s) AS i) g
"""
FILL_STEPS = """
INSERT INTO {steps} (run_id, position, name, kind, status, attempts, output, worker_id,
                     started_at, completed_at)
SELECT r.id, p, 'step_' || p, 'step', 'completed', 1, '1'::jsonb, r.worker_id,
       r.started_at, r.started_at + interval '100 ms'
FROM {runs} r, generate_series(0, 1) AS p
"""


def fill(url: str, runs: int) -> None:
    """An empty schema with perdure's tables, then ``runs`` runs and their steps."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    with perdure.App(url, schema=SCHEMA) as app:
        for name in WORKFLOWS:
            for version in (1, 2):
                app.workflow(name, version=version)(lambda ctx, value: value)
        app.register()
    names = sql.SQL("[{}]").format(sql.SQL(", ").join(sql.Literal(w) for w in WORKFLOWS))
    tables = {t: sql.Identifier(SCHEMA, t) for t in ("runs", "steps")}
    began = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(FILL_RUNS).format(workflows=names, **tables), {"n": runs})
        conn.execute(sql.SQL(FILL_STEPS).format(**tables))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(tables["runs"]))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(tables["steps"]))
    print(f"filled {runs:,} runs and {2 * runs:,} steps in {time.monotonic() - began:.0f} s")


def measure(url: str) -> None:
    """Time each page: median and slowest of 7 requests after a warm-up."""
    with perdure.App(url, schema=SCHEMA) as app:
        (sample,) = app.list_runs(status="failed", limit=1)
        halfway = datetime.now(UTC) - timedelta(days=15)
        deep = app.list_runs(before=halfway, limit=1).next_cursor
        client = TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1")
        pages: dict[str, str] = {
            "overview, last hour": "/?range=1h",
            "overview, last 24 hours": "/?range=24h",
            "runs, newest 50": "/runs",
            "runs, failed": "/runs?status=failed",
            "runs, one workflow, last 24 h": "/runs?workflow=checkout&range=24h",
            "runs, one worker": "/runs?worker=worker-7",
            "runs, key prefix": "/runs?key=order%3A77777",
            "runs, one tag": "/runs?tag=customer%3Dc7",
            "runs, 15 days deep (cursor)": f"/runs?after={deep}",
            "runs, live refresh": "/runs",
            "one failed run": f"/runs/{sample.id}",
            "workflows": "/workflows",
        }
        print(f"{'page':<34} {'median':>9} {'slowest':>9}")
        for label, path in pages.items():
            headers = {"x-perdure-fragment": "1"} if "live" in label else {}
            times = _timed(client, path, headers)
            print(f"{label:<34} {statistics.median(times):>7.1f}ms {max(times):>7.1f}ms")
        client.close()


def _timed(client: TestClient, path: str, headers: dict[str, str]) -> list[float]:
    times = []
    for attempt in range(8):
        began = time.perf_counter()
        answer = client.get(path, headers=headers)
        elapsed = (time.perf_counter() - began) * 1000
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
        if attempt:
            times.append(elapsed)
    return times


def main() -> None:
    """Fill, measure, and clean up the throwaway server if one was started."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    base: Path | None = None
    server: Any = None
    url = args.database_url
    if url is None:
        from perdure.store import embedded

        base = Path(tempfile.mkdtemp(prefix="perdure-bench-dashboard-", dir="/tmp"))
        base.chmod(0o755)
        server = embedded.ensure_server(base / "pg")
        url = server.url
    try:
        fill(url, args.runs)
        measure(url)
    finally:
        if base is not None:
            from perdure.store import embedded

            embedded.stop_server(base / "pg")
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
