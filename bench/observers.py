"""Cost of the worker's observer hooks per run, without a database.

Usage: python bench/observers.py [--runs N]

Calls the hooks a worker calls for one run of a 3-step workflow (a claim, an
execution, three step attempts, the run's end) N times, for: no observer, the
default LoggingObserver, and LoggingObserver with WorkerMetrics (what
``--metrics-port`` adds). Prints the best of 7 rounds in microseconds per run;
compare with the CPU per run that bench/throughput.py prints.
"""

from __future__ import annotations

import argparse
import time

from perdure.engine.observer import LoggingObserver, Observer, Observers, StepAttempt
from perdure.observability.metrics import WorkerMetrics
from perdure.store.rows import ClaimedTask, Fence


def per_run(observer: Observer, runs: int) -> float:
    """Microseconds of hook calls per run."""
    task = ClaimedTask(Fence(1, "worker-1", 1), "run-1", "run", "noop3", 1, "noop3", None, 0, 0)
    began = time.perf_counter()
    for _ in range(runs):
        observer.claimed([task], 0.001)
        token = observer.execution_started(task)
        for name in ("a", "b", "c"):
            step = StepAttempt(task, name, "step", 1)
            observer.step_finished(step, observer.step_started(step), "completed", 1e-4, None)
        observer.run_finished(task.run_id, task.workflow, "completed", None)
        observer.execution_finished(task, token, "completed", 0.01)
    return (time.perf_counter() - began) / runs * 1e6


def main() -> None:
    """Print the best of 7 rounds for each set of observers."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5000)
    args = parser.parse_args()
    for name, make in (
        ("no observer", Observer),
        ("logging (default)", lambda: Observers([LoggingObserver()])),
        ("logging + metrics", lambda: Observers([LoggingObserver(), WorkerMetrics()])),
    ):
        observer = make()
        best = min(per_run(observer, args.runs) for _ in range(7))
        print(f"{name:>18}: {best:5.1f} us/run")


if __name__ == "__main__":
    main()
