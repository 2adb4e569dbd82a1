"""Testing helpers for perdure users: run due work inline, on a real PostgreSQL.

``drain(app)`` runs every task that is due now in the calling process, with
the worker's own code path (a ``Worker`` in ``exit_when_idle``
mode), and returns when nothing is due. With ``App(clock=VirtualClock())``,
``clock.advance(days=7)`` followed by ``drain(app)`` finishes a week-long
``ctx.sleep`` at once.

``drain`` and ``run_until_complete`` watch workflow bodies for direct calls
to the clock, randomness and UUIDs (``datetime.now()``, ``time.time()``,
``random.randint()``, ``uuid.uuid4()``...): each is logged as a warning with
its file and line, and ``nondeterministic_calls()`` collects them for a test
to assert on. Pass ``detect_nondeterminism=False`` to turn this off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from perdure.api import draining, forms
from perdure.api.app import App
from perdure.api.handle import RunHandle
from perdure.engine import faults, nondeterminism
from perdure.engine.nondeterminism import NondeterministicCall
from perdure.engine.options import Unpack, WorkerArguments
from perdure.types import Step

__all__ = [
    "NondeterministicCall",
    "PatchStatus",
    "assert_replays",
    "assert_step_ran",
    "check_replay",
    "crash_after",
    "drain",
    "drain_async",
    "export_runs",
    "fail_step",
    "nondeterministic_calls",
    "patch_statuses",
    "run_until_complete",
    "step_names",
]


async def drain_async(app: App, **options: Unpack[WorkerArguments]) -> dict[str, int]:
    """Run all work due now, inline, until none is due; counts of what happened.

    Workflow bodies run under the detector of direct calls to the clock,
    randomness and UUIDs unless ``detect_nondeterminism=False`` is passed.
    """
    options.setdefault("detect_nondeterminism", True)
    return await draining.drain(app.worker_async, **options)


def drain(app: App, **options: Unpack[WorkerArguments]) -> dict[str, int]:
    """Run all work due now, inline (sync); see [`drain_async`][perdure.testing.drain_async].

    Safe to call from a test that has an event loop running: the work runs on
    a thread of its own.
    """
    return forms.run_on_thread(drain_async(app, **options))


def run_until_complete(app: App, run: RunHandle | str, **options: Unpack[WorkerArguments]) -> Any:
    """Drain ``app`` and return the run's result (ResultTimeout if it still waits).

    Like [`drain`][perdure.testing.drain], it watches workflow bodies for direct
    calls to the clock, randomness and UUIDs.
    """
    options.setdefault("detect_nondeterminism", True)
    return app.run_until_complete(run, **options)


@contextmanager
def nondeterministic_calls() -> Iterator[list[NondeterministicCall]]:
    """Collect the direct calls to the clock, randomness or UUIDs that workflow
    bodies make while the block runs (under ``drain``, ``run_until_complete``
    or a worker started with ``detect_nondeterminism=True``).

    Each is a [`NondeterministicCall`][perdure.testing.NondeterministicCall]:
    the run, the workflow, what was called (``datetime.now``, ``random.randint``...),
    the file and the line. ``assert not calls`` after the block fails a test
    whose workflow would replay differently; calls made inside a step are fine
    and never collected.
    """
    with nondeterminism.collect() as found:
        yield found


def step_names(app: App, run: RunHandle | str) -> list[str]:
    """The names of a run's recorded steps, in position order."""
    ref = run.id if isinstance(run, RunHandle) else run
    return [s.name for s in app.steps(ref)]


def assert_step_ran(app: App, run: RunHandle | str, name: str, *, times: int = 1) -> Step:
    """Assert step ``name`` of ``run`` completed after exactly ``times`` attempt(s)."""
    ref = run.id if isinstance(run, RunHandle) else run
    steps = app.steps(ref)
    found = [s for s in steps if s.name == name]
    recorded = ", ".join(f"{s.name}({s.status}, {s.attempts} attempt(s))" for s in steps) or "none"
    assert found, f"run {ref} has no step {name!r}; recorded steps: {recorded}"
    step = found[0]
    assert step.status == "completed" and step.attempts == times, (
        f"step {name!r} of run {ref}: expected completed after {times} attempt(s), "
        f"found {step.status} after {step.attempts}; recorded steps: {recorded}"
    )
    return step


@contextmanager
def crash_after(step: str, *, before: bool = False, times: int = 1) -> Iterator[faults.Fault]:
    """Make the executing worker die right after step ``step``'s checkpoint commits.

    With ``before=True`` it dies right before the checkpoint instead, so the
    step ran but its outcome was never recorded. The checkpoint takes the
    path it takes in production: a step's checkpoint is held until the
    workflow's next ``await`` and the worker dies once that write commits;
    the last step's checkpoint commits with the run's completion, so a crash
    after it finds the run completed. The dead worker writes
    nothing more: its lease must lapse before another drain resumes the run
    (advance a VirtualClock past the lease, or wait it out).
    """
    fault = faults.Fault(step, "before_checkpoint" if before else "after_checkpoint", times=times)
    faults.install(fault)
    try:
        yield fault
    finally:
        faults.remove(fault)


@contextmanager
def fail_step(
    step: str, *, times: int = 1, error: BaseException | None = None
) -> Iterator[faults.Fault]:
    """Make the next ``times`` attempts of step ``step`` raise ``error`` before running.

    The default error is a ConnectionError, which the step's retry policy
    retries like any transient failure.
    """
    fault = faults.Fault(
        step,
        "before_step",
        error=error or ConnectionError(f"injected failure of {step!r}"),
        times=times,
    )
    faults.install(fault)
    try:
        yield fault
    finally:
        faults.remove(fault)


from perdure.testing.replay import (  # noqa: E402
    PatchStatus,
    assert_replays,
    check_replay,
    export_runs,
    patch_statuses,
)
