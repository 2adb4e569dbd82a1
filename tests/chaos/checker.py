"""The checker: what must hold after a chaos workload, whatever faults it went through.

It reads the perdure tables and the workload's ledgers once everything has
stopped, and checks each invariant separately so that the summary lists every
one that broke, with examples:

- every run reached a final state (completed: the workload has no failing step);
- no run lost: every run the driver started exists, every parent has its child;
- one checkpoint per (run, step), and every step of each run checkpointed;
- each ``ctx.transaction`` effect committed exactly once;
- each plain step's effect happened at least once, and more than once only
  when a fault hit the worker that executed it, between the start of that
  execution and the start of the next one (or the end of the run);
- no history gap: one ``run_created``, one ``run_completed``, and one
  ``step_completed`` event per completed step;
- a fault is never counted as a failure: transaction steps (whose only
  failures here are lost connections) complete at their first attempt, and
  no workflow body is retried;
- no task claimed by two live leases: no two live claims of one task were seen
  while the workload ran, every claim handed out a fencing token of its own,
  and every completion was written under a claim its writer held.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from chaos.faults import KINDS, Fault

FINAL = ("completed", "failed", "cancelled", "compensated", "compensation_failed")


@dataclass
class Invariant:
    """One invariant's verdict, with up to a few examples of what broke it."""

    name: str
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing broke it."""
        return not self.violations


@dataclass
class Report:
    """Everything the summary prints."""

    runs: Counter[tuple[str, str]]
    faults: Counter[str]
    executions: int
    reexecutions: int
    invariants: list[Invariant]

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return all(i.ok for i in self.invariants)

    def lines(self) -> list[str]:
        """The summary, one line each."""
        out = [f"runs: {sum(self.runs.values())}"]
        for (workflow, status), n in sorted(self.runs.items()):
            out.append(f"  {workflow:<14} {status:<10} {n}")
        faults = ", ".join(f"{kind} {self.faults[kind]}" for kind in KINDS)
        out.append(f"faults injected: {sum(self.faults.values())} ({faults})")
        out.append(
            f"plain step executions: {self.executions}, "
            f"re-executions after a fault: {self.reexecutions}"
        )
        for inv in self.invariants:
            out.append(f"  [{'PASS' if inv.ok else 'FAIL'}] {inv.name}")
            out.extend(f"         {v}" for v in inv.violations[:5])
            if len(inv.violations) > 5:
                out.append(f"         ... and {len(inv.violations) - 5} more")
        return out


@dataclass(frozen=True)
class _Execution:
    run_id: str
    step: str
    pid: int
    started: float
    finished: float | None


def check(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    keys: Iterable[str],
    expected_steps: dict[str, tuple[list[str], list[str]]],
    faults: list[Fault],
    aftershock: float,
    live_double_claims: list[str],
) -> Report:
    """Check every invariant on ``schema`` after a workload that started runs ``keys``.

    ``aftershock`` is how long after a fault its effects may still make a
    step run again (a lease that expired during an outage, say).
    """
    conn.execute(f"SET search_path TO {schema}")
    runs = {
        str(r[0]): r
        for r in conn.execute(
            "SELECT id, workflow, status, key, parent_run_id, completed_at FROM runs"
        ).fetchall()
    }
    steps = conn.execute(
        "SELECT run_id::text, position, name, kind, status, attempts FROM steps"
    ).fetchall()
    history = conn.execute(
        "SELECT id, run_id::text, event, step_position, attempt, worker_id, detail"
        " FROM history ORDER BY id"
    ).fetchall()
    ledger = [
        _Execution(str(r[0]), r[1], r[2], r[3].timestamp(), r[4].timestamp() if r[4] else None)
        for r in conn.execute(
            "SELECT run_id, step, pid, started, finished FROM chaos_ledger ORDER BY started"
        ).fetchall()
    ]
    tx = Counter((str(r[0]), r[1]) for r in conn.execute("SELECT run_id, step FROM chaos_tx"))

    expected = {run_id: expected_steps[r[1]] for run_id, r in runs.items()}
    finals = _final_states(runs)
    lost = _lost_runs(runs, set(keys))
    checkpoints = _checkpoints(steps, expected)
    exactly_once = _transactions(tx, expected)
    plain, executions, extra = _plain_effects(ledger, expected, runs, faults, aftershock)
    gaps = _history_gaps(runs, steps, history)
    failures = _no_failures_counted(steps, history)
    leases = _leases(history, live_double_claims)
    return Report(
        runs=Counter((r[1], r[2]) for r in runs.values()),
        faults=Counter(f.kind for f in faults),
        executions=executions,
        reexecutions=extra,
        invariants=[finals, lost, checkpoints, exactly_once, plain, gaps, failures, leases],
    )


def _final_states(runs: dict[str, Any]) -> Invariant:
    inv = Invariant("every run reached a final state (completed)")
    for run_id, (_, workflow, status, *_rest) in runs.items():
        if status != "completed":
            inv.violations.append(f"run {run_id} ({workflow}) is {status}")
    return inv


def _lost_runs(runs: dict[str, Any], keys: set[str]) -> Invariant:
    inv = Invariant("no run lost (every started run and every child exists)")
    found = {r[3] for r in runs.values()}
    inv.violations += [f"no run with key {k}" for k in sorted(keys - found)]
    children = Counter(str(r[4]) for r in runs.values() if r[4] is not None)
    for run_id, (_, workflow, *_rest) in runs.items():
        if workflow == "chaos_parent" and children[run_id] != 1:
            inv.violations.append(f"parent {run_id} has {children[run_id]} children")
    return inv


def _checkpoints(steps: list[Any], expected: dict[str, tuple[list[str], list[str]]]) -> Invariant:
    inv = Invariant("one checkpoint per (run, step), every step checkpointed")
    by_name = Counter((run_id, name) for run_id, _, name, *_ in steps)
    inv.violations += [
        f"run {r} step {n}: {c} checkpoints" for (r, n), c in by_name.items() if c > 1
    ]
    completed = {(r, n) for r, _, n, _, status, _ in steps if status == "completed"}
    for run_id, (plain, transactions) in expected.items():
        for name in plain + transactions:
            if (run_id, name) not in completed:
                inv.violations.append(f"run {run_id} step {name}: no completed checkpoint")
    return inv


def _transactions(
    tx: Counter[tuple[str, str]], expected: dict[str, tuple[list[str], list[str]]]
) -> Invariant:
    inv = Invariant("every ctx.transaction effect committed exactly once")
    wanted = {(run_id, name) for run_id, (_, names) in expected.items() for name in names}
    for key in sorted(wanted | set(tx)):
        if tx[key] != 1:
            inv.violations.append(f"run {key[0]} transaction {key[1]}: {tx[key]} commits")
    return inv


def _plain_effects(
    ledger: list[_Execution],
    expected: dict[str, tuple[list[str], list[str]]],
    runs: dict[str, Any],
    faults: list[Fault],
    aftershock: float,
) -> tuple[Invariant, int, int]:
    """At least once; any execution but one must have been hit by a fault."""
    inv = Invariant("plain step effects: at least once, again only after a fault")
    by_step: dict[tuple[str, str], list[_Execution]] = defaultdict(list)
    for execution in ledger:
        by_step[(execution.run_id, execution.step)].append(execution)
    extra = 0
    for run_id, (plain, _) in expected.items():
        for name in plain:
            done = by_step.get((run_id, name), [])
            if not done:
                inv.violations.append(f"run {run_id} step {name}: never executed")
                continue
            extra += len(done) - 1
            ended = runs[run_id][5]
            ends = [e.started for e in done[1:]] + [
                ended.timestamp() if isinstance(ended, datetime) else float("inf")
            ]
            clean = [
                e
                for e, until in zip(done, ends, strict=True)
                if not _hit(e, until, faults, aftershock)
            ]
            if len(clean) > 1:
                pids = ", ".join(str(e.pid) for e in clean)
                inv.violations.append(
                    f"run {run_id} step {name}: {len(done)} executions, "
                    f"{len(clean)} with no fault to explain them (pids {pids})"
                )
    return inv, len(ledger), extra


def _hit(execution: _Execution, until: float, faults: list[Fault], aftershock: float) -> bool:
    """Whether a fault on this execution's worker fell between its start and ``until``."""
    slack = 0.5  # the server's clock and ours, and the gap between a fault and its record
    for fault in faults:
        if fault.pid not in (None, execution.pid):
            continue
        if fault.started <= until + slack and fault.ended + aftershock >= execution.started - slack:
            return True
    return False


#: The events that record a step's final checkpoint: a signal wait's is its own.
COMPLETIONS = ("step_completed", "signal_consumed")


def _history_gaps(runs: dict[str, Any], steps: list[Any], history: list[Any]) -> Invariant:
    inv = Invariant("no history gap (created, completed, one completion event per step)")
    events = Counter((run_id, event) for _, run_id, event, *_ in history)
    for run_id in runs:
        for event in ("run_created", "run_completed"):
            if events[(run_id, event)] != 1:
                inv.violations.append(f"run {run_id}: {events[(run_id, event)]} {event} events")
    completions = Counter((r, p) for _, r, event, p, *_ in history if event in COMPLETIONS)
    for run_id, position, name, _, status, _ in steps:
        n = completions[(run_id, position)]
        if status == "completed" and n != 1:
            inv.violations.append(f"run {run_id} step {name}: {n} completion events")
    return inv


def _no_failures_counted(steps: list[Any], history: list[Any]) -> Invariant:
    inv = Invariant("faults never counted as failures (of a transaction step or a workflow)")
    for run_id, _, name, kind, _, attempts in steps:
        if kind == "transaction" and attempts != 1:
            inv.violations.append(f"run {run_id} transaction {name}: {attempts} attempts")
    for _, run_id, event, *_, detail in history:
        # A plain step's retry hands the run back with this event too, naming
        # the step: its effects fail during outages, legitimately.
        if event == "run_retry_scheduled" and "step" not in (detail or {}):
            error = f"{detail.get('type')}: {detail.get('message')}"[:160]
            inv.violations.append(f"run {run_id}: the workflow was retried after {error}")
    return inv


def _leases(history: list[Any], live_double_claims: list[str]) -> Invariant:
    """Fencing tokens are never handed out twice; completions come from the latest claim."""
    inv = Invariant("no task claimed by two live leases")
    inv.violations += live_double_claims
    # A task is (run, step position) for a parallel or graph step's task, or
    # (run, None) for the run's own task.
    claims: dict[tuple[str, int | None], list[tuple[int, int, str]]] = defaultdict(list)
    for hid, run_id, event, position, attempt, worker, _ in history:
        if event in ("run_claimed", "step_claimed"):
            task = position if event == "step_claimed" else None
            claims[(run_id, task)].append((hid, attempt, worker))
    for (run_id, task), found in claims.items():
        tokens = Counter(attempt for _, attempt, _ in found)
        for attempt, n in tokens.items():
            if n > 1:
                inv.violations.append(
                    f"run {run_id} task {task}: fencing token {attempt} handed out {n} times"
                )
    for hid, run_id, event, position, _, worker, _ in history:
        if event not in COMPLETIONS or worker is None:
            continue
        task = position if (run_id, position) in claims else None
        before = [c for c in claims.get((run_id, task), []) if c[0] < hid]
        if not before or before[-1][2] != worker:
            holder = before[-1][2] if before else "nobody"
            inv.violations.append(
                f"run {run_id} position {position}: completed by {worker} "
                f"while the latest claim was {holder}'s"
            )
    return inv
