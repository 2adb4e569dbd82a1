"""bench/history_scale.py in small: 20,000 runs, and the plans of the dashboard's queries.

The benchmark times these queries over a million runs; here the plans are
checked instead (EXPLAIN, planned with the parameters' values as the API
sends them): each reads the index meant for it, and none reads a whole table
of runs, steps or history. Invariant 8: cost independent of history.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import perdure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import history_scale

pytestmark = pytest.mark.all_servers


@pytest.fixture(scope="module")
def dataset(pg_url: str) -> Iterator[history_scale.Dataset]:
    data = history_scale.generate(pg_url, 20_000)
    try:
        yield data
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {data.schema} CASCADE")


def test_dashboard_queries_and_the_claim_read_their_indexes(
    pg_url: str, dataset: history_scale.Dataset
) -> None:
    app = perdure.App(pg_url, schema=dataset.schema)
    try:
        plans: dict[str, list[str]] = {}
        with psycopg.connect(pg_url) as conn:
            for name, stmts in history_scale.statements(app, dataset).items():
                plans[name] = [line for s in stmts for line in history_scale.explain(conn, s)]
            # The API answers too, on the generated data.
            failed = app.list_runs(status="failed", since=dataset.now - timedelta(days=2))
            assert failed and all(r.status == perdure.RunStatus.FAILED for r in failed)
            rare = app.list_runs(workflow=dataset.rare_workflow)
            assert rare and all(r.workflow == dataset.rare_workflow for r in rare)
            assert len(app.history(dataset.sample_run)) == 6
            assert len(app.steps(dataset.sample_run)) == 3
    finally:
        app.close()

    def used(name: str) -> set[str]:
        return history_scale.indexes(plans[name])

    def few_rows(line: str) -> bool:
        # The oldest day partition holds only that day's last hours of the
        # generated month: late in the UTC day, a handful of rows, which
        # the planner rightly reads whole.
        found = re.search(r"Seq Scan on history_p\S+ .*rows=(\d+) ", line)
        return found is not None and int(found.group(1)) <= 10

    def whole_tables(name: str) -> list[str]:
        # The tables that grow with history. (The claim may read the small
        # tasks table whole to count claimed tasks; an empty partition, a day
        # ahead or the default one, costs nothing to read.)
        return [
            line
            for line in plans[name]
            if any(f"Seq Scan on {table}" in line for table in ("runs", "steps", "history"))
            and "cost=0.00..0.00" not in line
            and not few_rows(line)
        ]

    assert "runs_status_created_at_idx" in used("failed in the last hour")
    assert "runs_workflow_created_at_idx" in used("one workflow")
    assert "runs_worker_created_at_idx" in used("one worker")
    assert "runs_created_at_idx" in used("cursor page")
    one_run = used("one run")
    assert {"runs_pkey", "steps_pkey"} <= one_run
    # One index range per day partition of history (and the default one).
    assert sum(1 for index in one_run if index.endswith("run_id_id_idx")) >= 30
    # The claim reads a partial index of ready tasks: in claim order
    # (tasks_ready_idx) or by due time (tasks_due_idx), as the planner sees fit.
    assert used("claim") & {"tasks_ready_idx", "tasks_due_idx"}
    # An idle worker's next due time: the first entry of each queue by due time.
    assert "tasks_due_idx" in used("next due")
    for name in plans:
        assert whole_tables(name) == [], (name, whole_tables(name))


def test_the_generated_history_is_spread_over_day_partitions(
    pg_url: str, dataset: history_scale.Dataset
) -> None:
    with psycopg.connect(pg_url) as conn:
        rows: list[Any] = conn.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {dataset.schema}.history GROUP BY 1"
        ).fetchall()
    counts = dict(rows)
    assert sum(counts.values()) > 20_000 * 5
    assert counts.get(f"{dataset.schema}.history_default", 0) == 0
    assert len(counts) >= 30
