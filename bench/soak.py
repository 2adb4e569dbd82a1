"""Soak: 8 worker processes under a steady start rate for N minutes.

Usage: python bench/soak.py [--minutes 10] [--workers 8] [--rate 30] [--concurrency 4]
                            [--database-url URL] [--csv samples.csv]

Starts a private embedded PostgreSQL in a temporary folder (unless
--database-url is given), runs `perdure worker soak:app` processes, and starts
runs of a 4-step workflow (three plain steps, one ctx.transaction) at a steady
rate. Every few seconds it samples each worker's resident memory (RSS, from
/proc) and the server's connections. At the end it lets the queue drain and
reports:

- throughput: runs and steps completed per second over the soak;
- step latency: from the moment a step could begin (the run's creation for the
  first step, the previous checkpoint for the others) to its own checkpoint,
  p50 and p99; and run latency, creation to completion;
- connections: the most the workers held, and the most on the server;
- RSS per worker: the mean of the first and last minute after a minute of
  warm-up, and whether it stayed flat (grew less than 10 % or 5 MiB).

Not part of the test suite: it takes as long as you ask.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

import perdure

app = perdure.App()
SAMPLE_SECONDS = 5.0


def _touch() -> int:
    return os.getpid()


def _work(ms: float) -> float:
    time.sleep(ms / 1000)
    return ms


def _record(conn: psycopg.Connection[Any], n: int) -> int:
    row = conn.execute("SELECT %s::int + 1", (n,)).fetchone()
    return int(row[0]) if row else 0


@app.workflow("soak")
def soak(ctx: perdure.SyncContext, n: int) -> int:
    """Three plain steps and a transaction: the shape of ordinary work."""
    ctx.step("touch", _touch)
    ctx.step("work", _work, 5.0)
    ctx.step("again", _touch)
    return ctx.transaction("record", _record, n)  # type: ignore[no-any-return]


def main() -> None:
    """Run the soak and print its report."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rate", type=float, default=30.0, help="runs started per second")
    parser.add_argument("--concurrency", type=int, default=4, help="per worker")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--csv", default=None, help="write every sample to this file")
    args = parser.parse_args()

    base: Path | None = None
    url = args.database_url
    if url is None:
        from perdure.store import embedded

        base = Path(tempfile.mkdtemp(prefix="perdure-soak-", dir="/tmp"))
        base.chmod(0o755)
        url = embedded.ensure_server(base / "pg", max_connections=300).url
    schema = f"soak_{os.getpid()}"
    app.configure(url=url, schema=schema)
    app.register()
    env = dict(
        os.environ,
        PERDURE_DATABASE_URL=url,
        PERDURE_SCHEMA=schema,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    )
    command = [sys.executable, "-m", "perdure", "worker", "soak:app", "--log-level", "warning"]
    command += ["--concurrency", str(args.concurrency)]
    logs = Path(tempfile.mkdtemp(prefix="perdure-soak-logs-", dir="/tmp"))
    print(f"worker logs in {logs}")
    workers = [
        subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"worker-{i}.log").open("wb"),
        )
        for i in range(args.workers)
    ]
    samples: list[dict[str, Any]] = []
    try:
        began, ended = _drive(args, workers, url, samples)
        _drain(url, schema, timeout=120)
        _report(args, url, schema, began, ended, workers, samples)
        if args.csv:
            with open(args.csv, "w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=list(samples[0]))
                writer.writeheader()
                writer.writerows(samples)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        app.close()
        if base is not None:
            from perdure.store import embedded

            embedded.stop_server(base / "pg")
            shutil.rmtree(base, ignore_errors=True)


def _drive(
    args: argparse.Namespace,
    workers: list[subprocess.Popen[bytes]],
    url: str,
    samples: list[dict[str, Any]],
) -> tuple[float, float]:
    """Start runs at the rate for the duration, sampling as it goes; wall-clock start, end."""
    app.start("soak", -1).result(timeout=60)  # the workers are up and listening
    began = time.time()
    deadline = time.monotonic() + args.minutes * 60
    next_sample = time.monotonic()
    n = 0
    start = time.monotonic()
    while time.monotonic() < deadline:
        due = start + n / args.rate
        time.sleep(max(0.0, due - time.monotonic()))
        app.start("soak", n)
        n += 1
        if time.monotonic() >= next_sample:
            next_sample += SAMPLE_SECONDS
            samples.append(_sample(time.time() - began, workers, url))
            print(
                f"{samples[-1]['t']:6.0f} s  {n} runs started  "
                f"rss {samples[-1]['rss_mib_mean']:.1f} MiB/worker  "
                f"connections {samples[-1]['worker_connections']}",
                flush=True,
            )
    return began, time.time()


def _sample(t: float, workers: list[subprocess.Popen[bytes]], url: str) -> dict[str, Any]:
    rss = [_rss_mib(w.pid) for w in workers]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE application_name LIKE 'perdure-worker%%'), count(*)"
            " FROM pg_stat_activity WHERE backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    sample: dict[str, Any] = {
        "t": round(t, 1),
        "worker_connections": row[0],
        "server_connections": row[1],
        "rss_mib_mean": statistics.mean(rss),
    }
    sample.update({f"rss_mib_{i}": round(r, 2) for i, r in enumerate(rss)})
    return sample


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _drain(url: str, schema: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                f"SELECT count(*) FROM {schema}.runs WHERE status <> 'completed'"
            ).fetchone()
            if row == (0,):
                return
            time.sleep(0.5)
    print(f"warning: runs still unfinished after {timeout:.0f} s")


def _report(
    args: argparse.Namespace,
    url: str,
    schema: str,
    began: float,
    ended: float,
    workers: list[subprocess.Popen[bytes]],
    samples: list[dict[str, Any]],
) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        runs, steps, run_latency = conn.execute(
            "SELECT count(*), sum((SELECT count(*) FROM steps s WHERE s.run_id = r.id)),"
            " array_agg(extract(epoch FROM completed_at - created_at))"
            " FROM runs r WHERE status = 'completed' AND input::int >= 0"
        ).fetchone() or (0, 0, [])
        (step_latency,) = conn.execute(
            "SELECT array_agg(latency) FROM ("
            "  SELECT extract(epoch FROM s.completed_at - coalesce("
            "    lag(s.completed_at) OVER (PARTITION BY s.run_id ORDER BY s.position),"
            "    r.created_at)) AS latency"
            "  FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.input::int >= 0) l"
        ).fetchone() or ([],)
        (in_window,) = conn.execute(
            "SELECT count(*) FROM runs"
            " WHERE completed_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
            (began, ended),
        ).fetchone() or (0,)
    seconds = ended - began
    print(
        f"\nsoak: {args.workers} workers x concurrency {args.concurrency}, "
        f"{args.rate:g} runs/s offered for {seconds / 60:.1f} min"
    )
    print(
        f"throughput: {in_window / seconds:.1f} runs/s, {4 * in_window / seconds:.1f} steps/s "
        f"({runs} runs, {steps} steps completed in all)"
    )
    print(f"step latency: {_quantiles([float(x) for x in step_latency])}")
    print(f"run latency:  {_quantiles([float(x) for x in run_latency])}")
    print(
        f"connections: workers held at most {max(s['worker_connections'] for s in samples)}, "
        f"server at most {max(s['server_connections'] for s in samples)}"
    )
    _report_rss(workers, samples)


def _report_rss(workers: list[subprocess.Popen[bytes]], samples: list[dict[str, Any]]) -> None:
    per_minute = max(1, int(60 / SAMPLE_SECONDS))
    steady = samples[per_minute:] if len(samples) > 3 * per_minute else samples
    flat = True
    for i, worker in enumerate(workers):
        series = [s[f"rss_mib_{i}"] for s in steady]
        first = statistics.mean(series[:per_minute])
        last = statistics.mean(series[-per_minute:])
        growth = last - first
        ok = growth < max(5.0, 0.10 * first)
        flat &= ok
        print(
            f"rss worker {worker.pid}: first minute {first:.1f} MiB, last minute {last:.1f} MiB, "
            f"max {max(series):.1f} MiB ({growth:+.1f} MiB) {'flat' if ok else 'GROWING'}"
        )
    print(f"rss: {'flat' if flat else 'GROWING'} over {len(steady)} samples after warm-up")


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "no samples"

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return f"p50 {pick(0.5):7.1f} ms  p99 {pick(0.99):7.1f} ms  (n={len(ordered)})"


if __name__ == "__main__":
    main()
