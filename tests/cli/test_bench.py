"""`perdure bench` in a tiny configuration: the table and the JSON have every figure.

Speed is not asserted here (the machine is shared and CI's is small): only
that each part ran and reported, and that the report keeps its shape.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROWS = [
    "pgbench.commits_per_s",
    "perdure.runs_per_s",
    "perdure.steps_per_s",
    "perdure.commits_per_step",
    "perdure.round_trips_per_step",
    "perdure.statements_per_step",
    "perdure.wal_flushes_per_step",
    "perdure.step_p50_ms",
    "perdure.step_p99_ms",
    "perdure.worker_cpu_ms_per_run",
    "perdure.server_cpu_ms_per_run",
    "latency.start_p50_ms",
    "latency.start_p99_ms",
    "latency.signal_p50_ms",
    "latency.signal_p99_ms",
    "graph.fanout_ms",
    "graph.fanout1000_ms",
    "graph.chain_ms",
    "map.map_steps_per_s",
    "map.ratio",
    "map.worker_rss_peak_mib",
    "gather.naps_ms",
    "start.threads:16_runs_per_s",
    "start.threads:16_cpu_ms",
    "start.many_runs_per_s",
    "map.w100.steps_per_s",
    "map.w100.ratio",
    "map.w100.rss_mib",
    "map.w300.steps_per_s",
    "map.w300.ratio",
    "map.w300.rss_mib",
    "dbos.runs_per_s",
    "dbos.commits_per_step",
    "dbos.statements_per_step",
    "pgqrs.runs_per_s",
    "pgqrs.commits_per_step",
    "pgqrs.statements_per_step",
    "absurd.runs_per_s",
    "absurd.commits_per_step",
    "absurd.statements_per_step",
    "preloaded.runs_per_s",
    "perdure_vs_dbos",
    "perdure_vs_best_queue",
    "steps_vs_pgbench",
    "preloaded_vs_empty",
]

#: Figures a run without peers must have measured (statement counts need
#: pg_stat_statements, which the test server does not load).
MEASURED = [
    "pgbench.commits_per_s",
    "perdure.runs_per_s",
    "perdure.commits_per_step",
    "perdure.round_trips_per_step",
    "latency.start_p50_ms",
    "latency.signal_p50_ms",
    "graph.fanout_ms",
    "graph.chain_ms",
    "map.w100.steps_per_s",
    "map.w300.ratio",
    "preloaded.runs_per_s",
    "steps_vs_pgbench",
    "preloaded_vs_empty",
]


@pytest.mark.timeout(300)
def test_bench_prints_the_table_and_writes_the_same_as_json(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "perdure", "bench", "--database-url", pg_url]
    command += ["--runs", "20", "--repeat", "1", "--no-peers", "--samples", "5"]
    command += ["--preload", "200", "--pgbench-seconds", "1", "--json", str(out)]
    command += ["--map-widths", "100,300"]
    env = dict(os.environ, COLUMNS="200")
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, env=env)
    assert done.returncode == 0, done.stderr[-2000:]

    report = json.loads(out.read_text())
    rows = {row["key"]: row for row in report["rows"]}
    assert list(rows) == ROWS
    for key in MEASURED:
        assert rows[key]["median"] is not None and rows[key]["median"] > 0, key
    for peer in ("dbos", "pgqrs", "absurd"):
        assert rows[f"{peer}.runs_per_s"]["median"] is None  # --no-peers
    assert rows["perdure_vs_dbos"]["median"] is None
    for key in ("latency.start_p50_ms", "perdure.commits_per_step", "steps_vs_pgbench"):
        assert rows[key]["goal"] and rows[key]["met"] in (True, False)
    assert set(report["ratios"]) == {
        "perdure_vs_dbos",
        "perdure_vs_best_queue",
        "steps_vs_pgbench",
        "preloaded_vs_empty",
    }
    assert report["options"]["runs"] == 20 and report["options"]["repeat"] == 1

    # The table shows the same rows, in order, with their medians.
    lines = done.stdout.splitlines()
    labels = [row["label"] for row in report["rows"]]
    found = [next((i for i, line in enumerate(lines) if label in line), -1) for label in labels]
    assert -1 not in found and found == sorted(found), done.stdout
    runs_line = lines[found[ROWS.index("perdure.runs_per_s")]]
    assert "runs/s" in runs_line


#: Each peer's figures and the ratios built from them.
PEER_ROWS = [
    "dbos.runs_per_s",
    "dbos.commits_per_step",
    "pgqrs.runs_per_s",
    "pgqrs.commits_per_step",
    "absurd.runs_per_s",
    "absurd.commits_per_step",
    "perdure_vs_dbos",
    "perdure_vs_best_queue",
    "fanout.dbos.w100.ms",
    "fanout_w100_vs_dbos",
    "fanout.absurd.w100.ms",
    "fanout_w100_vs_absurd",
]


@pytest.mark.bench
@pytest.mark.timeout(600)
def test_bench_with_its_peers_measures_each_peer_and_the_ratios(
    pg_url: str, tmp_path: Path
) -> None:
    """DBOS, pgqrs and Absurd run the same workload and the README's ratios come out of it."""
    missing = [m for m in ("dbos", "pgqrs", "absurd_sdk") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(
            f"the bench extra is not installed (no {', '.join(missing)}): "
            "pip install -e '.[dev,bench]', as the README's test command and .ci/run do"
        )
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "perdure", "bench", "--database-url", pg_url]
    command += ["--runs", "20", "--repeat", "1", "--peers", "--samples", "3", "--concurrency", "8"]
    command += ["--preload", "0", "--pgbench-seconds", "1", "--json", str(out)]
    command += ["--map-widths", "100", "--peer-fanouts", "100"]
    env = dict(os.environ, COLUMNS="200")
    done = subprocess.run(command, capture_output=True, text=True, timeout=580, env=env)
    assert done.returncode == 0, done.stderr[-3000:]

    rows = {row["key"]: row for row in json.loads(out.read_text())["rows"]}
    for key in PEER_ROWS:
        assert rows[key]["median"] is not None and rows[key]["median"] > 0, (key, rows[key])
    for peer in ("DBOS", "pgqrs", "Absurd"):
        assert peer in done.stdout
