"""Replay recorded runs against workflow code, with no side effects: check-replay.

Each run's recorded steps are fed to the workflow code through a replay
cursor (engine.cursor) in an execution with no store: recorded steps return
their outputs, no step function runs, nothing is read or written. The
replay stops at the end of the recorded history (the code may append new
steps after it: that is a safe change) or at the first position where the
code asks for a different step than the one recorded (the determinism
guard would stop that run after the deploy).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from perdure.engine.control import ReplayEnd, StaleHistory, Suspend, Unwind
from perdure.engine.cursor import ReplayCursor
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution, Spec
from perdure.engine.writer import FencedWriter
from perdure.errors import NonDeterminismError
from perdure.store.rows import Fence, RunTask
from perdure.types import Step


@dataclass(frozen=True)
class ReplayReport:
    """How one recorded run fares against the code: compatible or where it diverges."""

    run_id: str
    workflow: str
    version: int
    ok: bool
    replayed: int
    position: int | None = None
    recorded: str | None = None
    requested: str | None = None
    error: str | None = None
    #: What ``ctx.patched`` answered in the replay, by patch id: False where
    #: the run's history predates the patch (it needs the old code path).
    patches: tuple[tuple[str, bool], ...] = ()

    def describe(self) -> str:
        """One line for people."""
        if self.ok:
            return f"run {self.run_id}: ok ({self.replayed} recorded step(s) replay)"
        if self.position is not None:
            return (
                f"run {self.run_id}: diverges at position {self.position}: recorded "
                f"{self.recorded!r}, the code asks for {self.requested!r}"
            )
        return f"run {self.run_id}: replay failed: {self.error}"


async def replay_run(
    spec: Spec,
    threads: ThreadPoolExecutor,
    *,
    run_id: str,
    input: Any,
    steps: Sequence[Step],
    updates: Sequence[dict[str, Any]] = (),
) -> ReplayReport:
    """Replay one run's recorded ``steps`` against ``spec``'s code, applying its
    accepted ``updates`` (name, payload, anchor_position, seq) at their waits."""
    if getattr(spec, "kind", "function") == "graph":
        return _check_graph(spec, run_id, steps)
    cursor = ReplayCursor.of(run_id, spec.name, spec.version, steps)
    report = await _replay(spec, threads, cursor, input, steps, updates)
    return replace(report, patches=tuple(sorted(cursor.patches.items())))


async def _replay(
    spec: Spec,
    threads: ThreadPoolExecutor,
    cursor: ReplayCursor,
    input: Any,
    steps: Sequence[Step],
    updates: Sequence[dict[str, Any]] = (),
) -> ReplayReport:
    """Feed ``cursor``'s history to the workflow code; the report of where it stopped."""
    run_id = cursor.run_id
    task = _replaying(spec, run_id, input)
    env = ExecutionEnv(None, lease_seconds=0.0, threads=threads)
    # The writer's store is None: any write ends the replay (ReplayEnd).
    writer = FencedWriter(env, task.fence, run_id)
    execution = Execution(task, spec, env, cursor, asyncio.get_running_loop(), writer)
    execution.applied_updates = _by_wait(updates)
    try:
        await spec.invoke(execution, input)
    except (ReplayEnd, Suspend, Unwind, StaleHistory, NonDeterminismError):
        pass
    except Exception as exc:
        # A recorded history that ends in a failure the code raises again is
        # the same behaviour, not a divergence.
        if cursor.diverged is None and cursor.position < len(steps):
            return _report(spec, run_id, ok=False, replayed=cursor.position, error=_text(exc))
    return _verdict(spec, cursor, len(steps))


def _verdict(spec: Spec, cursor: ReplayCursor, recorded: int) -> ReplayReport:
    """Where the replay left ``cursor``: diverged, a recorded step not asked for, or ok."""
    guard = cursor.diverged
    if guard is not None:
        return _report(
            spec,
            cursor.run_id,
            ok=False,
            replayed=guard.position,
            position=guard.position,
            recorded=guard.recorded,
            requested=guard.requested,
        )
    missed = cursor.unreached()
    if missed:
        # The code finished without asking for every recorded step: one was removed.
        return _report(
            spec,
            cursor.run_id,
            ok=False,
            replayed=cursor.position,
            position=missed[0].position,
            recorded=missed[0].name,
        )
    return _report(spec, cursor.run_id, ok=True, replayed=recorded)


def _by_wait(updates: Sequence[dict[str, Any]]) -> dict[int, list[Any]]:
    """The accepted ``updates`` by the position of the wait each was applied at, in order."""
    by_position: dict[int, list[Any]] = {}
    ordered = sorted(
        (u for u in updates if u.get("anchor_position") is not None),
        key=lambda u: (int(u["anchor_position"]), int(u.get("seq") or 0)),
    )
    for update in ordered:
        by_position.setdefault(int(update["anchor_position"]), []).append(dict(update))
    return by_position


def _report(spec: Spec, run_id: str, **fields: Any) -> ReplayReport:
    return ReplayReport(run_id, spec.name, spec.version, **fields)


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _replaying(spec: Spec, run_id: str, input: Any) -> RunTask:
    """What the workflow's context reports of the run being replayed (no task is held)."""
    return RunTask(
        fence=Fence(task_id=0, worker_id="check-replay", attempt=0),
        run_id=run_id,
        workflow=spec.name,
        version=spec.version,
        queue=spec.queue,
        input=input,
        failures=0,
        lapses=0,
    )


def _check_graph(spec: Any, run_id: str, steps: Sequence[Step]) -> ReplayReport:
    """A graph has no code to replay: its recorded steps must sit where the graph puts them.

    Step i of the graph is at position i and its compensation at n + i; a
    deploy that renames, removes or reorders steps moves them.
    """
    graph_steps = spec.steps
    n = len(graph_steps)
    report = functools.partial(ReplayReport, run_id, spec.name, spec.version)
    for step in steps:
        expected = None
        if step.position < 2 * n:
            name = graph_steps[step.position % n].name
            expected = name if step.position < n else f"compensate:{name}"
        if step.name != expected:
            return report(
                ok=False,
                replayed=step.position,
                position=step.position,
                recorded=step.name,
                requested=expected,
            )
    return report(ok=True, replayed=len(steps))
