"""Run the demo: start workers, trigger runs, kill a worker mid-flight, check the outcome.

Everything the summary says is read back from the database afterwards:
perdure's own records through [`App`][perdure.App] methods, and the demo's
ledger and orders tables with its named queries (``app.statements.demos``).
Nothing is taken on trust from the processes that did the work.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from perdure.api.app import App
from perdure.demo import workflows
from perdure.store import caller
from perdure.types import Run, RunStatus

#: The workers' lease: short, so that the killed worker's runs are recovered within seconds.
LEASE_SECONDS = 3
WORKER_TARGET = "perdure.demo.workflows:app"
# The share of runs that must be completed before a worker is killed, so that
# the crash lands in the middle of the work rather than before or after it.
KILL_AT = 0.25
_POLL = 0.2


class DemoError(Exception):
    """The demo could not run or did not finish; the message says why."""


@dataclass(frozen=True)
class DemoConfig:
    """What one demo does: where, how many runs and workers, and whether to kill one."""

    url: str
    schema: str
    log_dir: Path
    runs: int = 50
    workers: int = 3
    seed: int = 0
    kill: bool = True
    deadline: float = 90.0


@dataclass(frozen=True)
class Kill:
    """The worker the demo killed."""

    worker_id: str
    pid: int
    held: int
    completed_before: int


@dataclass
class Summary:
    """What the database says happened, and whether every invariant held."""

    total: int
    statuses: Counter[str]
    steps_checkpointed: int
    step_retries: int
    kill: Kill | None
    recovered: list[Run]
    reexecuted: int
    reexecuted_unexplained: int
    completed_steps_rerun: list[str]
    orders: int
    duplicate_orders: int
    completed_checkouts: int
    missing_orders: int
    elapsed: float
    replacement: bool = False
    sample: str | None = None

    @property
    def recovered_by(self) -> Counter[str]:
        """How many recovered runs each worker finished."""
        return Counter(run.worker_id or "?" for run in self.recovered)

    def problems(self) -> list[str]:
        """Every broken invariant, as a sentence; empty when the demo succeeded."""
        found = []
        done = self.statuses[RunStatus.COMPLETED.value]
        if done != self.total:
            found.append(f"only {done} of {self.total} runs completed ({dict(self.statuses)})")
        if self.completed_steps_rerun:
            found.append(
                f"{len(self.completed_steps_rerun)} completed step(s) ran again after their "
                f"checkpoint: {', '.join(self.completed_steps_rerun[:5])}"
            )
        if self.reexecuted_unexplained:
            found.append(
                f"{self.reexecuted_unexplained} step(s) ran twice in runs that never lost a lease"
            )
        if self.duplicate_orders or self.missing_orders or self.orders != self.completed_checkouts:
            found.append(
                f"{self.orders} order rows for {self.completed_checkouts} completed checkouts "
                f"({self.duplicate_orders} duplicated, {self.missing_orders} missing)"
            )
        return found


class WorkerPool:
    """``perdure worker`` subprocesses on the demo's database, each logging to a file."""

    def __init__(self, url: str, schema: str, log_dir: Path) -> None:
        """Workers will serve the demo's workflows at ``url``/``schema``."""
        self.env = dict(os.environ, PERDURE_DATABASE_URL=url, PERDURE_SCHEMA=schema)
        self.log_dir = log_dir
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, Path] = {}
        self.killed: set[int] = set()

    def start(self) -> int:
        """Start one worker; its pid."""
        log = self.log_dir / f"worker-{len(self.procs) + 1}.log"
        command = [sys.executable, "-m", "perdure", "worker", WORKER_TARGET]
        command += ["--concurrency", "8", "--lease-seconds", str(LEASE_SECONDS)]
        command += ["--log-level", "warning"]
        with log.open("wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.procs[proc.pid] = proc
        self.logs[proc.pid] = log
        return proc.pid

    def alive(self) -> list[int]:
        """Pids of the workers still running."""
        return [pid for pid, proc in self.procs.items() if proc.poll() is None]

    def check(self) -> None:
        """Fail if a worker the demo did not kill has exited."""
        for pid, proc in self.procs.items():
            if pid not in self.killed and proc.poll() is not None:
                tail = "\n".join(self.logs[pid].read_text(errors="replace").splitlines()[-15:])
                raise DemoError(
                    f"worker pid {pid} exited with code {proc.returncode}; "
                    f"the end of its log ({self.logs[pid]}):\n{tail}"
                )

    def kill(self, pid: int) -> None:
        """SIGKILL one worker: no shutdown, no goodbye, its leases simply stop being renewed."""
        self.killed.add(pid)
        self.procs[pid].send_signal(signal.SIGKILL)
        self.procs[pid].wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every worker, wait up to ``timeout`` s in all, then SIGKILL the rest."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def run_demo(config: DemoConfig, console: Console) -> Summary:
    """Run the whole demo on an already prepared schema and return its summary."""
    started = time.monotonic()
    pool = WorkerPool(config.url, config.schema, config.log_dir)
    with App(config.url, schema=config.schema) as client:
        try:
            for _ in range(config.workers):
                pool.start()
            ids = _wait_for_workers(client, pool)
            console.print(
                f"Started {len(ids)} worker{'s' if len(ids) != 1 else ''} "
                f"(pid {', '.join(map(str, ids))}) with a {LEASE_SECONDS} s lease",
                soft_wrap=True,
            )
            inputs = workflows.demo_inputs(config.runs, config.seed)
            for name, key, data in inputs:
                client.start(name, data, key=key)
            mix = Counter(name for name, _, _ in inputs)
            console.print(
                f"Started {config.runs} runs: "
                + ", ".join(f"{n} {name}" for name, n in sorted(mix.items())),
                soft_wrap=True,
            )
            kill, replacement = _watch(client, pool, ids, config, console)
        finally:
            pool.stop()
        return _summarize(client, config, kill, replacement, time.monotonic() - started)


def _wait_for_workers(client: App, pool: WorkerPool, timeout: float = 60.0) -> dict[int, str]:
    """Wait until every worker process has registered; map pid to worker id."""
    deadline = time.monotonic() + timeout
    while True:
        pool.check()
        ids = {w.pid: w.id for w in client.workers() if w.status == "running"}
        found = {pid: ids[pid] for pid in pool.alive() if pid in ids}
        if len(found) == len(pool.alive()):
            return found
        if time.monotonic() > deadline:
            raise DemoError(f"the workers did not start within {timeout:.0f} s")
        time.sleep(_POLL)


def _watch(
    client: App, pool: WorkerPool, ids: dict[int, str], config: DemoConfig, console: Console
) -> tuple[Kill | None, bool]:
    """Show progress until every run is final, killing one worker on the way."""
    deadline = time.monotonic() + config.deadline
    threshold = max(1, math.ceil(config.runs * KILL_AT))
    kill: Kill | None = None
    replacement = False
    columns = (
        TextColumn("[bold]runs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("runs", total=config.runs, detail="")
        while True:
            counts = Counter(run.status.value for run in client.list_runs(limit=10_000))
            final = sum(n for status, n in counts.items() if RunStatus(status).is_final)
            detail = (
                f"queued {counts['queued']} · running {counts['running']} · "
                f"completed {counts['completed']} · failed {counts['failed']}"
            )
            progress.update(bar, completed=final, detail=detail)
            if final >= config.runs:
                return kill, replacement
            if config.kill and kill is None and counts["completed"] >= threshold:
                kill = _kill_busiest(client, pool, ids, config.seed, counts["completed"])
                if kill is not None:
                    progress.console.print(
                        f"[bold red]killed worker {kill.worker_id} (pid {kill.pid}) "
                        f"holding {kill.held} run{'s' if kill.held != 1 else ''}[/] with "
                        f"SIGKILL: its leases lapse within {LEASE_SECONDS} s, then a live "
                        "worker's reaper makes its runs claimable again",
                        soft_wrap=True,
                    )
                    if not pool.alive():
                        # With a single worker nobody is left to recover anything.
                        pid = pool.start()
                        replacement = True
                        progress.console.print(
                            f"started a replacement worker (pid {pid}) to recover them"
                        )
            pool.check()
            if time.monotonic() > deadline:
                raise DemoError(
                    f"not every run finished within {config.deadline:.0f} s ({detail}); "
                    f"the worker logs are in {config.log_dir}"
                )
            # The interval at which the progress bar refreshes; each pass reads
            # the runs' real state, so nothing depends on this sleep's length.
            time.sleep(_POLL)


def _kill_busiest(
    client: App, pool: WorkerPool, ids: dict[int, str], seed: int, completed: int
) -> Kill | None:
    """SIGKILL the live worker holding the most runs (ties drawn from ``seed``)."""
    held = {w.id: w.held for w in client.workers()}
    candidates = [(held.get(ids[pid], 0), pid) for pid in pool.alive() if pid in ids]
    random.Random(seed).shuffle(candidates)
    busiest = max(candidates, key=lambda c: c[0], default=(0, 0))
    if busiest[0] == 0:
        return None
    pool.kill(busiest[1])
    return Kill(ids[busiest[1]], busiest[1], busiest[0], completed)


def _summarize(
    client: App, config: DemoConfig, kill: Kill | None, replacement: bool, elapsed: float
) -> Summary:
    """Read back what happened and check it against the invariants."""
    runs = client.list_runs(limit=10_000)
    checkpoints: dict[tuple[str, str], Any] = {}
    retries = 0
    recovered: list[Run] = []
    for run in runs:
        for step in client.steps(run.id):
            if step.status.value == "completed":
                checkpoints[(run.id, step.name)] = step.completed_at
        events = [event.event for event in client.history(run.id)]
        retries += events.count("step_retry_scheduled")
        if "lease_expired" in events:
            recovered.append(run)
    demo = client.statements.demos
    with psycopg.connect(config.url, autocommit=True) as conn:
        ledger = [
            (row["run_id"], row["step"], row["at"])
            for row in caller.execute_sync(conn, demo.ledger_rows())
        ]
        orders = [
            (row["order_id"], row["rows"]) for row in caller.execute_sync(conn, demo.order_counts())
        ]
    # A step that runs again after its checkpoint committed would break
    # memoization. Each ledger row is written before its step's checkpoint (or
    # in the same transaction), so a row stamped later than the checkpoint is
    # exactly such a re-execution.
    rerun = sorted(
        {
            f"{run_id[:8]}…/{step}"
            for run_id, step, at in ledger
            if (run_id, step) in checkpoints and at > checkpoints[(run_id, step)]
        }
    )
    per_step = Counter((run_id, step) for run_id, step, _ in ledger)
    lost_lease = {run.id for run in recovered}
    reexecuted = sum(n - 1 for n in per_step.values())
    unexplained = sum(n - 1 for (run_id, _), n in per_step.items() if run_id not in lost_lease)
    checkouts = {
        run.input["id"]
        for run in runs
        if run.workflow == "checkout" and run.status == RunStatus.COMPLETED
    }
    recorded = {order_id: n for order_id, n in orders}
    return Summary(
        total=len(runs),
        statuses=Counter(run.status.value for run in runs),
        steps_checkpointed=len(checkpoints),
        step_retries=retries,
        kill=kill,
        recovered=recovered,
        reexecuted=reexecuted,
        reexecuted_unexplained=unexplained,
        completed_steps_rerun=rerun,
        orders=sum(recorded.values()),
        duplicate_orders=sum(n - 1 for n in recorded.values()),
        completed_checkouts=len(checkouts),
        missing_orders=len(checkouts - set(recorded)),
        elapsed=elapsed,
        replacement=replacement,
        # A recovered run is the most interesting one to show; else the first.
        sample=next((run.key or run.id for run in [*recovered, *reversed(runs)]), None),
    )
