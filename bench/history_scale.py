"""Dashboard queries with a million finished runs behind them.

Usage: python bench/history_scale.py [--runs N] [--repeat R] [--database-url URL] [--keep]

Generates N runs (default 1,000,000) spread over the last 30 days, with three
steps and six history entries each, into a fresh schema with COPY; the newest
tenth holds a few thousand live ones (queued with ready tasks, running, waiting). Then
it times the queries a dashboard runs, through perdure's own API, and prints
each one's median over R repetitions (default 7) with the indexes its plan
uses, and the plan of the claim query (task_claim), which must read a
partial index of ready tasks (tasks_ready_idx or tasks_due_idx). Without
--database-url it uses the embedded server, like the other scripts here.
tests/history/test_scale_plans.py runs the same generator and plan checks on
20,000 runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import perdure
from perdure.store.statement import Statement

WORKFLOWS = [f"wf_{i:02d}" for i in range(20)]
# Skewed like real traffic: the first workflows take most runs, the last few
# are rare, and a rare one is what "one workflow's last 50 runs" asks for.
WORKFLOW_WEIGHTS = [2.0 ** -(i / 3) for i in range(20)]
WORKERS = [f"bench-worker-{i:02d}" for i in range(40)]
FINAL = [("completed", 0.92), ("failed", 0.05), ("cancelled", 0.02), ("compensated", 0.01)]
STEPS = ("reserve", "charge", "ship")
TRACEBACK = (
    'Traceback (most recent call last):\n  File "app.py", line 12, in ship\n'
    "    raise RuntimeError('carrier down')\nRuntimeError: carrier down\n"
)


@dataclass
class Dataset:
    """What was generated, and what the queries look for."""

    schema: str
    runs: int
    now: datetime
    rare_workflow: str
    worker: str
    sample_run: str
    cursor_run: str
    key_prefix: str


def _esc(text: str) -> str:
    """Text for COPY's text format."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _run_id(epoch: float, rng: random.Random) -> str:
    """A time-ordered id like perdure's own (UUID version 7 layout) for a past time."""
    value = (int(epoch * 1000) & ((1 << 48) - 1)) << 80 | rng.getrandbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))


def _rows(
    runs: int, days: float, now: float, live: int, seed: int
) -> Iterator[tuple[str, list[str], list[str], list[str], list[str]]]:
    """Per run: its id, and its lines of runs, steps, history and tasks in COPY text format."""
    rng = random.Random(seed)
    span = days * 86400
    statuses = [s for s, _ in FINAL]
    weights = [w for _, w in FINAL]
    for i in range(runs):
        created = now - span + span * (i + 1) / runs - 1.0
        run_id = _run_id(created, rng)
        workflow = rng.choices(WORKFLOWS, WORKFLOW_WEIGHTS)[0]
        worker = rng.choice(WORKERS)
        version = 1 if i < runs // 2 else 2
        # The live runs are among the newest tenth, scattered, like the live
        # work of a busy system between runs that finished.
        recent = runs - i <= max(runs // 10, 1)
        if recent and rng.random() < live / max(runs // 10, 1):
            status = ("queued", "running", "waiting")[i % 3]
        else:
            status = rng.choices(statuses, weights)[0]
        started = created + 0.05
        finished = status in statuses
        done = started + rng.uniform(0.05, 3.0) if finished else None
        error = "\\N"
        if status in ("failed", "compensated"):
            error = _esc(
                json.dumps(
                    {"type": "RuntimeError", "message": "carrier down", "traceback": TRACEBACK}
                )
            )
        output = _esc(json.dumps({"shipment": f"S{i}"})) if status == "completed" else "\\N"
        run_worker = "\\N" if status == "queued" else worker
        run_line = "\t".join(
            [
                run_id,
                workflow,
                str(version),
                workflow,
                f"order:{i:07d}",
                status,
                _esc(json.dumps({"order_id": i})),
                output,
                error,
                run_worker,
                "\\N",
                _ts(created),
                "\\N" if status == "queued" else _ts(started),
                _ts(done) if done else "\\N",
                _ts(done or started),
            ]
        )
        steps: list[str] = []
        history = [f"{run_id}\t{_ts(created)}\trun_created\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N"]
        tasks: list[str] = []
        if status != "queued":
            history.append(
                f"{run_id}\t{_ts(started)}\trun_claimed\t\\N\t\\N\t1\t{worker}\t\\N\t\\N"
            )
        if finished:
            assert done is not None
            at = started
            for position, name in enumerate(STEPS):
                end = started + (done - started) * (position + 1) / len(STEPS)
                failed = error != "\\N" and position == len(STEPS) - 1
                step_status = "failed" if failed else "completed"
                step_out = "\\N" if failed else _esc(json.dumps({"ok": position}))
                step_err = error if failed else "\\N"
                steps.append(
                    "\t".join(
                        [
                            run_id,
                            str(position),
                            name,
                            "step",
                            step_status,
                            "1",
                            step_out,
                            step_err,
                            worker,
                            _ts(at),
                            _ts(end),
                        ]
                    )
                )
                detail = step_err
                history.append(
                    "\t".join(
                        [
                            run_id,
                            _ts(end),
                            f"step_{step_status}",
                            str(position),
                            name,
                            "1",
                            worker,
                            detail,
                            f"{end - at:.6f} seconds",
                        ]
                    )
                )
                at = end
            history.append(
                "\t".join(
                    [
                        run_id,
                        _ts(done),
                        f"run_{status}",
                        "\\N",
                        "\\N",
                        "1",
                        worker,
                        error,
                        f"{done - started:.6f} seconds",
                    ]
                )
            )
        else:
            # Live runs hold the queue: ready now, claimed, or ready later (waiting).
            task_status = {"queued": "ready", "running": "claimed", "waiting": "ready"}[status]
            available = now + 3600 if status == "waiting" else created
            tasks.append(
                "\t".join(
                    [
                        run_id,
                        workflow,
                        workflow,
                        str(version),
                        task_status,
                        _ts(available),
                        worker if status == "running" else "\\N",
                        _ts(now + 30) if status == "running" else "\\N",
                        str(int(status == "running")),
                        _ts(created),
                    ]
                )
            )
        yield run_id, [run_line], steps, history, tasks


COPIES = {
    "runs": "COPY {s}.runs (id, workflow, version, queue, key, status, input, output, error, "
    "worker_id, parent_run_id, created_at, started_at, completed_at, updated_at) FROM STDIN",
    "steps": "COPY {s}.steps (run_id, position, name, kind, status, attempts, output, error, "
    "worker_id, started_at, completed_at) FROM STDIN",
    "history": "COPY {s}.history (run_id, at, event, step_position, step_name, attempt, "
    "worker_id, detail, duration) FROM STDIN",
    "tasks": "COPY {s}.tasks (run_id, queue, workflow, version, status, available_at, "
    "worker_id, lease_expires_at, attempt, created_at) FROM STDIN",
}


def generate(
    url: str,
    runs: int,
    *,
    days: float = 30.0,
    live: int = 3000,
    seed: int = 7,
    progress: Callable[[str], None] = lambda line: None,
) -> Dataset:
    """Migrate a fresh schema and fill it with ``runs`` runs by COPY; what was made."""
    schema = f"hscale_{uuid.uuid4().hex[:8]}"
    app = perdure.App(url, schema=schema)
    app.ensure_schema()
    app.close()
    live = min(live, runs // 20)
    with psycopg.connect(url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        # Day partitions over the whole span, as the workers' maintenance
        # would have made them day by day (at most 15 days a call).
        for start in range(0, int(days) + 5, 15):
            conn.execute(
                f"SELECT {schema}.history_partitions_ensure(%s, %s)",
                (now - timedelta(days=days + 1 - start), min(14, int(days) + 4 - start)),
            )
        started = time.perf_counter()
        ids: list[str] = []
        buffers: dict[str, list[str]] = {name: [] for name in COPIES}
        # One connection per table: a connection runs one COPY at a time. The
        # runs COPY ends (and commits) first, so that the foreign keys of
        # steps and tasks, checked when their COPY ends, find their runs.
        with contextlib.ExitStack() as stack:
            blocks = {
                name: stack.enter_context(psycopg.connect(url, autocommit=True))
                .cursor()
                .copy(text.format(s=schema))
                for name, text in COPIES.items()
            }
            writers = {name: block.__enter__() for name, block in blocks.items()}
            rows = _rows(runs, days, now.timestamp(), live, seed)
            for n, (run_id, *parts) in enumerate(rows, start=1):
                ids.append(run_id)
                for name, lines in zip(COPIES, parts, strict=True):
                    buffers[name].extend(lines)
                if n % 20_000 == 0 or n == runs:
                    for name, lines in buffers.items():
                        if lines:
                            writers[name].write(("\n".join(lines) + "\n").encode())
                            lines.clear()
                    if n % 100_000 == 0:
                        progress(f"  {n:,} runs in {time.perf_counter() - started:.0f} s")
            for block in blocks.values():
                block.__exit__(None, None, None)
        progress(f"copied {runs:,} runs in {time.perf_counter() - started:.0f} s; analyzing")
        for table in ("runs", "steps", "history", "tasks"):
            conn.execute(f"ANALYZE {schema}.{table}")
    rare = WORKFLOWS[-1]
    return Dataset(
        schema=schema,
        runs=runs,
        now=now,
        rare_workflow=rare,
        worker=WORKERS[17],
        sample_run=ids[len(ids) // 3],
        cursor_run=ids[len(ids) // 2],
        key_prefix=f"order:{len(ids) // 2:07d}"[:-2],
    )


def queries(app: perdure.App, data: Dataset) -> dict[str, Callable[[], Any]]:
    """The dashboard's queries, each a call of perdure's API."""
    middle = app.get_run(data.cursor_run)
    from perdure.api.listing import encode_cursor

    cursor = encode_cursor(middle)

    def one_run() -> Any:
        run = data.sample_run
        return app.get_run(run), app.steps(run), app.history(run)

    return {
        "failed in the last hour": lambda: app.list_runs(
            status="failed", since=data.now - timedelta(hours=1)
        ),
        f"last 50 runs of {data.rare_workflow} (rare)": lambda: app.list_runs(
            workflow=data.rare_workflow, limit=50
        ),
        f"runs of worker {data.worker}": lambda: app.list_runs(worker=data.worker, limit=50),
        "one run with its steps and history": one_run,
        "a list page after a cursor (mid-table)": lambda: app.list_runs(cursor=cursor, limit=50),
        "newest 50 runs": lambda: app.list_runs(limit=50),
        f"key prefix {data.key_prefix}": lambda: app.list_runs(
            key_prefix=data.key_prefix, limit=50
        ),
    }


def statements(app: perdure.App, data: Dataset) -> dict[str, list[Statement[Any]]]:
    """The SQL statements behind :func:`queries`, for EXPLAIN."""

    statements = app.statements
    middle = app.get_run(data.cursor_run)
    both_versions = [1] * len(WORKFLOWS) + [2] * len(WORKFLOWS)

    def page(**filters: Any) -> Statement[Any]:
        cursor = filters.pop("cursor", None)
        return statements.runs.list(
            perdure.RunFilter(**filters).checked().listing(), cursor=cursor, limit=51
        )

    return {
        "failed in the last hour": [page(status="failed", since=data.now - timedelta(hours=1))],
        "one workflow": [page(workflow=data.rare_workflow)],
        "one worker": [page(worker=data.worker)],
        "one run": [
            statements.runs.get(data.sample_run),
            statements.steps.list(data.sample_run),
            statements.history.list(data.sample_run),
        ],
        "cursor page": [page(cursor=(middle.created_at, middle.id))],
        "claim": [claim_statement(app)],
        "next due": [
            statements.tasks.next_due("bench-claimer", WORKFLOWS, WORKFLOWS * 2, both_versions)
        ],
    }


def claim_statement(app: perdure.App, queues: list[str] | None = None) -> Statement[Any]:
    """The claim of a worker serving ``queues`` (default: the busiest one), versions 1 and 2."""
    queues = queues or WORKFLOWS[:1]
    return app.statements.tasks.claim(
        worker_id="bench-claimer",
        queues=queues,
        names=queues * 2,
        versions=[1] * len(queues) + [2] * len(queues),
        limit=16,
        lease_seconds=30,
    )


def explain(conn: psycopg.Connection[Any], stmt: Statement[Any]) -> list[str]:
    """EXPLAIN of ``stmt`` planned with its parameter values, as text lines."""
    rows = conn.execute(("EXPLAIN " + stmt.query).encode(), stmt.params).fetchall()
    return [str(r[0]) for r in rows]


def indexes(plan: list[str]) -> set[str]:
    """The names of the indexes a text plan scans."""
    found = set()
    for line in plan:
        for marker in (" using ", "Bitmap Index Scan on "):
            if marker in line:
                found.add(line.split(marker, 1)[1].split()[0])
    return found


def main() -> None:
    """Generate, time, explain, print; drop the schema unless --keep."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the generated schema.")
    args = parser.parse_args()
    url = perdure.App(args.database_url).url
    print(f"generating {args.runs:,} runs (3 steps, 6 history entries each) with COPY")
    data = generate(url, args.runs, progress=print)
    app = perdure.App(url, schema=data.schema)
    try:
        print(f"\nmedian of {args.repeat} repetitions, through perdure's API:")
        for name, call in queries(app, data).items():
            call()  # warm the pool and the server's caches
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                call()
                times.append((time.perf_counter() - started) * 1000)
            print(f"  {statistics.median(times):7.2f} ms  {name}")
        with psycopg.connect(url) as conn:
            print("\nindexes each query's plan reads:")
            for name, stmts in statements(app, data).items():
                used = sorted(set().union(*(indexes(explain(conn, s)) for s in stmts)))
                print(f"  {name}: {', '.join(used)}")
            ready = conn.execute(
                f"SELECT count(*) FILTER (WHERE status = 'ready' AND available_at <= now()), "
                f"count(*) FROM {data.schema}.tasks"
            ).fetchone()
            print(
                f"\nEXPLAIN task_claim of a worker serving queue {WORKFLOWS[0]} "
                f"({ready[0]} ready tasks due now, {ready[1]} tasks in all):"  # type: ignore[index]
            )
            for line in explain(conn, claim_statement(app)):
                print(f"  {line}")
            every = indexes(explain(conn, claim_statement(app, WORKFLOWS)))
            print(
                f"(the claim of a worker serving all {len(WORKFLOWS)} queues reads these "
                f"indexes: {', '.join(sorted(every))})"
            )
    finally:
        app.close()
        if not args.keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {data.schema} CASCADE")


if __name__ == "__main__":
    main()
