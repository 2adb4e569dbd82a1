"""Replay recorded runs against workflow code, with no side effects: check-replay.

Each run's recorded steps are fed to the workflow code through the normal
executor in ``replay_only`` mode: recorded steps return their outputs, no step
function runs, nothing is written. The replay stops at the end of the recorded
history (the code may append new steps after it: that is a safe change) or at
the first position where the code asks for a different step than the one
recorded (the determinism guard would stop that run after the deploy).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from perdure.engine.control import LeaseLost, StaleHistory, Suspend
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution, ReplayEnd, Spec
from perdure.errors import NonDeterminismError
from perdure.store.rows import ClaimedTask, Fence
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore
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
    statements: Statements,
    threads: ThreadPoolExecutor,
    *,
    run_id: str,
    input: Any,
    steps: Sequence[Step],
) -> ReplayReport:
    """Replay one run's recorded ``steps`` against ``spec``'s code."""
    if getattr(spec, "kind", "function") == "graph":
        return _check_graph(spec, run_id, steps)
    task = ClaimedTask(
        fence=Fence(task_id=0, worker_id="check-replay", attempt=0),
        run_id=run_id,
        kind="run",
        workflow=spec.name,
        version=spec.version,
        queue=spec.queue,
        input=input,
        failures=0,
        lapses=0,
    )
    # The store is never opened: a replay-only execution reads nothing and
    # writes nothing; it only needs the statements' clock for its types.
    store = AsyncStore("postgresql://", statements, min_size=0, max_size=1, name="check-replay")
    env = ExecutionEnv(store, lease_seconds=0.0, threads=threads)
    execution = Execution(
        task,
        spec,
        env,
        {s.position: s for s in steps},
        asyncio.get_running_loop(),
        replay_only=True,
    )

    report = functools.partial(ReplayReport, run_id, spec.name, spec.version)

    def diverged(guard: NonDeterminismError) -> ReplayReport:
        return report(
            ok=False,
            replayed=guard.position,
            position=guard.position,
            recorded=guard.recorded,
            requested=guard.requested,
        )

    try:
        await spec.invoke(execution, input)
    except (ReplayEnd, Suspend, LeaseLost, StaleHistory):
        pass
    except NonDeterminismError as guard:
        return diverged(guard)
    except Exception as exc:
        # A recorded history that ends in a failure the code raises again is
        # the same behaviour, not a divergence.
        if not isinstance(execution.fatal, NonDeterminismError) and execution.position < len(steps):
            return report(
                ok=False, replayed=execution.position, error=f"{type(exc).__name__}: {exc}"
            )
    if isinstance(execution.fatal, NonDeterminismError):
        return diverged(execution.fatal)
    missed = [s for s in steps if s.position >= execution.position]
    if missed:
        # The code finished without asking for every recorded step: one was removed.
        return report(
            ok=False,
            replayed=execution.position,
            position=missed[0].position,
            recorded=missed[0].name,
            requested=None,
        )
    return report(ok=True, replayed=len(steps))


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
