"""The whole product through PgBouncer in transaction pooling mode.

Workers, the App and the steps' own writes use the pooled URL; migrations and
the workers' LISTEN and maintenance lock use the direct URL. The pooler has
fewer server connections than the workers ask for. Every run must complete
and every ``ctx.transaction`` effect must be committed exactly once.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator

import psycopg
import pytest

import perdure
from apps import chaos_app
from chaos import checker
from deploy.pooler import Pooler, missing_reason
from helpers import WorkerProcess, wait_until
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.server import BackgroundServer

RUNS = 220
WORKERS = 3
CONCURRENCY = 8
#: Server connections of the pooler: well under the workers' demand
#: (each worker's pool alone may grow to concurrency + 4).
POOL_SIZE = 6


@pytest.fixture
def pooler(pg_url: str) -> Iterator[Pooler]:
    """A transaction-mode PgBouncer before the suite's server."""
    reason = missing_reason()
    if reason is not None:
        pytest.fail(reason)
    running = Pooler.start(pg_url, POOL_SIZE)
    try:
        yield running
    finally:
        print(f"--- pgbouncer log ---\n{running.log()[-3000:]}")
        running.close()


@pytest.mark.timeout(300)
def test_a_mixed_workload_runs_through_a_transaction_pooler(
    pg_url: str, schema: str, pooler: Pooler, spawn_pooled: Callable[[], WorkerProcess]
) -> None:
    app = perdure.App(pooler.url, schema=schema, direct_url=pg_url, pool_size=4)
    try:
        app.ensure_schema()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for ddl in chaos_app.LEDGER_DDL:
                conn.execute(ddl.replace("{s}", schema))
        workers = [spawn_pooled() for _ in range(WORKERS)]
        wait_until(
            lambda: {w.name for w in app.workflows()} >= set(chaos_app.STEPS),
            60,
            what="the workers to register",
        )
        rng = random.Random(17)
        names = [w for w in chaos_app.STEPS for _ in range(2 if w == "chaos_linear" else 1)]
        keys: list[str] = []
        handles = []
        for n in range(RUNS):
            workflow = rng.choice(names)
            params = {"work": round(rng.uniform(0.0, 0.05), 3), "sleep": rng.uniform(0.1, 0.5)}
            key = f"pooled-{n}"
            handles.append((workflow, app.start(workflow, params, key=key)))
            keys.append(key)
        for workflow, handle in handles:
            if workflow == "chaos_signal":
                app.signal(handle.id, "go", {"key": handle.id}, key="go")
        for _, handle in handles:
            handle.result(timeout=180)
        listed = app.list_runs(limit=500)
        assert len(listed) >= RUNS
        assert all(w.proc.poll() is None for w in workers), "a worker exited"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            report = checker.check(
                conn,
                schema,
                keys=keys,
                expected_steps=chaos_app.STEPS,
                faults=[],
                aftershock=0.0,
                live_double_claims=[],
            )
        print("\n".join(report.lines()))
        broken = [(inv.name, inv.violations[:5]) for inv in report.invariants if not inv.ok]
        assert not broken, broken
        # The CLI and the dashboard on the pooled URL too.
        listed_cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "perdure",
                "--database-url",
                pooler.url,
                "--direct-url",
                pg_url,
                "--schema",
                schema,
                "runs",
                "list",
                "--json",
                "--limit",
                "5",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert listed_cli.returncode == 0, listed_cli.stderr
        assert len(json.loads(listed_cli.stdout)["runs"]) == 5
        server = BackgroundServer(app, DashboardConfig(port=0))
        try:
            server.wait_started()
            base = server.url.rstrip("/")
            for page in ("/", "/runs", f"/runs/{handles[0][1].id}", "/workflows"):
                with urllib.request.urlopen(base + page, timeout=30) as response:
                    assert response.status == 200
        finally:
            server.stop()
        # The statements went through the pooler: it served transactions.
        with psycopg.connect(pooler.admin_url, autocommit=True) as admin:
            cur = admin.cursor()
            cur.execute("SHOW STATS")
            columns = [d.name for d in cur.description or []]
            stats = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        served = sum(int(r["total_xact_count"]) for r in stats if r["database"] != "pgbouncer")
        assert served > RUNS * 5, stats
    finally:
        app.close()


@pytest.fixture
def spawn_pooled(pg_url: str, schema: str, pooler: Pooler) -> Iterator[Callable[[], WorkerProcess]]:
    """Start chaos-app workers on the pooled URL, with the direct URL for session work."""
    procs: list[WorkerProcess] = []

    def spawn() -> WorkerProcess:
        proc = WorkerProcess.start(
            "apps.chaos_app:app",
            pooler.url,
            schema,
            [
                "--concurrency",
                str(CONCURRENCY),
                "--lease-seconds",
                "10",
                "--shutdown-seconds",
                "1",
                "--direct-url",
                pg_url,
            ],
            {},
        )
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
        print(f"--- worker {proc.pid} (exit {proc.proc.poll()}) ---\n{proc.output()[-4000:]}")
