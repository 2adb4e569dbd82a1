"""What the engine tells its observers: claims, executions, steps, how runs end.

This is the engine's one channel of events: every moment a worker reports
(a claim, a step, a wait, a signal taken, an idle claim loop...) is a typed
hook here.

A worker calls these hooks at the moments worth counting, tracing or logging;
``perdure.observability`` implements Prometheus metrics and OpenTelemetry
spans on them, and ``LoggingObserver`` writes the log records about runs
and steps. Hooks run inline on the worker's event loop, so each must be quick
and do no I/O: observing never adds a database round trip.

Every record logged about a run or a step carries the fields of
``LOG_FIELDS`` as ``extra`` attributes. While a task executes, they are
also kept in a context variable (``log_fields``), so that records logged by
the workflow's own code can be given them too
(``perdure.observability.LogContextFilter``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, Sized
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from perdure.engine.control import Outcome
from perdure.errors import LeaseLost
from perdure.store.rows import ClaimedTask
from perdure.store.store import AsyncStore
from perdure.types import PruneResult

#: The ``extra`` fields of every record about a run or a step (None when not
#: applicable: ``step`` in a record about the whole run).
LOG_FIELDS = ("run_id", "workflow", "step", "attempt", "worker_id")

#: The task executing in this context, and its step and attempt when a step runs.
#: The fields are built from it only when a record asks for them.
_current: ContextVar[tuple[ClaimedTask, str | None, int | None] | None] = ContextVar(
    "perdure_log_fields", default=None
)

run_log = logging.getLogger("perdure.run")
step_log = logging.getLogger("perdure.step")


def task_fields(
    task: ClaimedTask, step: str | None = None, attempt: int | None = None
) -> dict[str, Any]:
    """The log fields of ``task``: its run, workflow, worker and claim (or step) attempt."""
    return {
        "run_id": task.run_id,
        "workflow": task.workflow,
        "step": step if step is not None else task.step_name,
        "attempt": attempt if attempt is not None else task.fence.attempt,
        "worker_id": task.fence.worker_id,
    }


def log_fields() -> dict[str, Any]:
    """The log fields of the execution (and step) in progress in this context; {} if none."""
    current = _current.get()
    return task_fields(*current) if current is not None else {}


@dataclass(frozen=True, slots=True)
class StepAttempt:
    """One attempt at one step that runs (replayed steps do not run)."""

    task: ClaimedTask
    name: str
    #: ``step``, ``transaction`` or ``compensation``.
    kind: str
    #: 1 on the first try.
    attempt: int


class WorkerView(Protocol):
    """What an observer may read of the worker it observes."""

    @property
    def queues(self) -> Sequence[str]:
        """The queues the worker claims from."""

    @property
    def store(self) -> AsyncStore | None:
        """The worker's store while it runs (None before its start and after its stop)."""

    @property
    def running(self) -> Sized:
        """The tasks executing now."""

    @property
    def stopping(self) -> bool:
        """Whether the worker was asked to stop."""

    @property
    def heartbeat_seconds(self) -> float:
        """Seconds between two heartbeats."""

    @property
    def stuck_threads(self) -> int:
        """Threads still running a step nobody waits for (engine/threads.py)."""


class Observer:
    """Hooks the engine calls; each does nothing here. Subclass and override some."""

    def worker_started(self, worker: WorkerView) -> None:
        """The worker registered and is about to claim (its store is open); raise to refuse."""

    def worker_stopped(self, worker: WorkerView) -> None:
        """The worker stopped claiming and gave back its work."""

    def heartbeat(self) -> None:
        """A heartbeat reached the database."""

    def claimed(self, tasks: Sequence[ClaimedTask], seconds: float) -> None:
        """A claim took ``seconds`` (queue locks included) and returned ``tasks``."""

    def execution_started(self, task: ClaimedTask) -> Any:
        """A claimed task starts executing; the value returned comes back at its end."""
        return None

    def execution_finished(
        self, task: ClaimedTask, token: Any, outcome: Outcome, seconds: float
    ) -> None:
        """The execution of ``task`` ended after ``seconds`` with ``outcome``.

        The outcome is what the execution did, an ``Outcome``
        (engine/control.py; a ``str``): ``completed``, ``failed``, ``retrying``,
        ``suspended`` (a wait or a backoff), ``lease_lost``,
        ``step_task_completed``, ``error`` (a database error) ...
        """

    def step_started(self, step: StepAttempt) -> Any:
        """A step attempt starts; the value returned comes back at its end."""
        return None

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """The attempt ended: ``completed``, ``retrying``, ``failed``, ``snoozed`` or
        ``interrupted`` (lease lost, worker stopping, run cancelled); ``seconds``
        is the time of the step's own code, ``error`` what it raised."""

    def run_retrying(self, task: ClaimedTask, delay: float, error: BaseException) -> None:
        """The workflow body raised and the run will be tried again after ``delay`` s."""

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None
    ) -> None:
        """This worker ended the run: completed, failed, compensated, compensation_failed."""

    def lease_lost(self, task: ClaimedTask) -> None:
        """Another worker owns ``task`` now; this one stops executing it."""

    def reaped_for_good(self, count: int) -> None:
        """This worker's reaper reaped ``count`` tasks for good: their lease lapsed
        ``max_lapses`` times. By default it calls the deprecated ``dead_lettered``."""
        self.dead_lettered(count)

    def dead_lettered(self, count: int) -> None:
        """Deprecated name of ``reaped_for_good``, still called by it: override that."""

    def loop_blocked(self, run_id: str | None, step: str | None, seconds: float) -> None:
        """A step (or workflow code) held the event loop ``seconds`` without yielding."""

    def trace_context(self, task: ClaimedTask) -> str | None:
        """Propagation headers (JSON) for a run that ``task``'s execution starts now."""
        return None

    def ranked(self, rank: int, queue_ranks: Mapping[str, int]) -> None:
        """A heartbeat told the worker its rank among the live workers (0 holds the
        fleet's duties), and by queue among those serving each of its queues."""

    def worker_idle(self, free: int) -> None:
        """The claim loop found no more due work and waits, with ``free`` slots."""

    def worker_full(self, stuck: int) -> None:
        """Every slot is taken (``stuck`` of them by stuck threads): nothing is claimed."""

    def thread_stuck(self, stuck: int) -> None:
        """A step's thread outlived its timeout; ``stuck`` threads are stuck now."""

    def thread_freed(self, stuck: int) -> None:
        """A stuck thread returned; ``stuck`` are left."""

    def maintenance_pass(self, result: PruneResult | None) -> None:
        """A maintenance pass ended; what retention pruned (None: not this worker's turn)."""

    def run_waiting(self, task: ClaimedTask, step: str, waiting_for: Mapping[str, Any]) -> None:
        """The run parked at ``step``, waiting for ``waiting_for`` (a time, a signal...)."""

    def signal_consumed(self, task: ClaimedTask, name: str) -> None:
        """The run took the next signal ``name``."""

    def child_started(self, task: ClaimedTask, child_run_id: str) -> None:
        """The run started (or found, on replay) child run ``child_run_id``."""

    def steps_scheduled(self, task: ClaimedTask, steps: int, waiting: int) -> None:
        """A gather made ``steps`` step tasks for other workers; ``waiting`` are pending."""

    def step_checkpointed(self, run_id: str, step: str, status: str) -> None:
        """The checkpoint of ``step`` (``completed``, ``failed``...) was written."""

    def run_compensating(self, run_id: str, compensations: int | None) -> None:
        """The run failed and runs its compensations (how many, when known)."""

    def simulated_crash(self, task: ClaimedTask) -> None:
        """A test's fault stopped the execution as a crash would (nothing more is written)."""

    def lease_taken(self, task: ClaimedTask) -> None:
        """The heartbeat found ``task`` held by another worker: its execution stops at
        its next ``ctx`` call (where ``lease_lost`` is told)."""


class Observers(Observer):
    """Several observers called in order, as one; a failing observer never stops the engine.

    An exception raised by a hook is logged (the first time for that observer
    and hook) and otherwise ignored: a metrics or tracing bug must not change
    what happens to a run. Only ``worker_started`` may refuse the start (a
    metrics port already taken, say).
    """

    def __init__(self, observers: Sequence[Observer], counts: dict[str, int] | None = None) -> None:
        """Call each of ``observers`` at every hook, in this order.

        ``counts`` (the worker's) counts each hook called, by its name, and
        each run ended, as ``run_<status>``.
        """
        self.observers = tuple(observers)
        self.counts = {} if counts is None else counts
        self._failed: set[tuple[int, str]] = set()
        # The bound methods of each hook, looked up once: hooks run per step.
        self._hooks = {
            hook: tuple(getattr(o, hook) for o in self.observers)
            for hook in vars(Observer)
            if not hook.startswith("_")
        }

    def _failure(self, observer: Observer, hook: str) -> None:
        if (id(observer), hook) not in self._failed:
            self._failed.add((id(observer), hook))
            logging.getLogger("perdure.worker").exception(
                "observer %r failed in %s (later failures there are not logged)", observer, hook
            )

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def _all(self, hook: str, *args: Any) -> list[Any]:
        self._count(hook)
        results = []
        for observer, method in zip(self.observers, self._hooks[hook], strict=True):
            try:
                results.append(method(*args))
            except Exception:
                self._failure(observer, hook)
                results.append(None)
        return results

    def _closing(self, hook: str, subject: Any, tokens: Any, *args: Any) -> None:
        self._count(hook)
        # Innermost (last started) first, as nested context managers would.
        for observer, method, token in zip(
            reversed(self.observers), reversed(self._hooks[hook]), reversed(tokens), strict=True
        ):
            try:
                method(subject, token, *args)
            except Exception:
                self._failure(observer, hook)

    def worker_started(self, worker: WorkerView) -> None:
        """Tell each observer. An error here stops the worker before it claims anything."""
        self._count("worker_started")
        for o in self.observers:
            o.worker_started(worker)

    def worker_stopped(self, worker: WorkerView) -> None:
        """Tell each observer."""
        self._all("worker_stopped", worker)

    def heartbeat(self) -> None:
        """Tell each observer."""
        self._all("heartbeat")

    def claimed(self, tasks: Sequence[ClaimedTask], seconds: float) -> None:
        """Tell each observer."""
        self._all("claimed", tasks, seconds)

    def execution_started(self, task: ClaimedTask) -> Any:
        """Tell each observer; their tokens, in order."""
        return self._all("execution_started", task)

    def execution_finished(
        self, task: ClaimedTask, token: Any, outcome: Outcome, seconds: float
    ) -> None:
        """Tell each observer, innermost first."""
        self._closing("execution_finished", task, token, outcome, seconds)

    def step_started(self, step: StepAttempt) -> Any:
        """Tell each observer; their tokens, in order."""
        return self._all("step_started", step)

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """Tell each observer, innermost first."""
        self._closing("step_finished", step, token, status, seconds, error)

    def run_retrying(self, task: ClaimedTask, delay: float, error: BaseException) -> None:
        """Tell each observer."""
        self._all("run_retrying", task, delay, error)

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None
    ) -> None:
        """Tell each observer."""
        self._count(f"run_{status}")
        self._all("run_finished", run_id, workflow, status, error)

    def lease_lost(self, task: ClaimedTask) -> None:
        """Tell each observer."""
        self._all("lease_lost", task)

    def reaped_for_good(self, count: int) -> None:
        """Tell each observer."""
        self._all("reaped_for_good", count)

    def dead_lettered(self, count: int) -> None:
        """Deprecated name of ``reaped_for_good``: tell each observer through it."""
        self.reaped_for_good(count)

    def loop_blocked(self, run_id: str | None, step: str | None, seconds: float) -> None:
        """Tell each observer."""
        self._all("loop_blocked", run_id, step, seconds)

    def trace_context(self, task: ClaimedTask) -> str | None:
        """The first trace context an observer gives."""
        for found in self._all("trace_context", task):
            if found is not None:
                return str(found)
        return None

    def ranked(self, rank: int, queue_ranks: Mapping[str, int]) -> None:
        """Tell each observer."""
        self._all("ranked", rank, queue_ranks)

    def worker_idle(self, free: int) -> None:
        """Tell each observer."""
        self._all("worker_idle", free)

    def worker_full(self, stuck: int) -> None:
        """Tell each observer."""
        self._all("worker_full", stuck)

    def thread_stuck(self, stuck: int) -> None:
        """Tell each observer."""
        self._all("thread_stuck", stuck)

    def thread_freed(self, stuck: int) -> None:
        """Tell each observer."""
        self._all("thread_freed", stuck)

    def maintenance_pass(self, result: PruneResult | None) -> None:
        """Tell each observer."""
        self._all("maintenance_pass", result)

    def run_waiting(self, task: ClaimedTask, step: str, waiting_for: Mapping[str, Any]) -> None:
        """Tell each observer."""
        self._all("run_waiting", task, step, waiting_for)

    def signal_consumed(self, task: ClaimedTask, name: str) -> None:
        """Tell each observer."""
        self._all("signal_consumed", task, name)

    def child_started(self, task: ClaimedTask, child_run_id: str) -> None:
        """Tell each observer."""
        self._all("child_started", task, child_run_id)

    def steps_scheduled(self, task: ClaimedTask, steps: int, waiting: int) -> None:
        """Tell each observer."""
        self._all("steps_scheduled", task, steps, waiting)

    def step_checkpointed(self, run_id: str, step: str, status: str) -> None:
        """Tell each observer."""
        self._all("step_checkpointed", run_id, step, status)

    def run_compensating(self, run_id: str, compensations: int | None) -> None:
        """Tell each observer."""
        self._all("run_compensating", run_id, compensations)

    def simulated_crash(self, task: ClaimedTask) -> None:
        """Tell each observer."""
        self._all("simulated_crash", task)

    def lease_taken(self, task: ClaimedTask) -> None:
        """Tell each observer."""
        self._all("lease_taken", task)


class LoggingObserver(Observer):
    """The records about runs and steps, on the ``perdure.run`` and ``perdure.step`` loggers.

    Routine progress (a run or step completed) is logged at DEBUG, retries at
    INFO, failures and lost leases at WARNING. It also keeps the fields of
    the execution and step in progress for ``log_fields``. No payload is ever
    logged; with ``redact_errors`` (payloads encrypted), an error is named by
    its type alone, since its message may quote the data it failed on.
    """

    def __init__(self, redact_errors: bool = False) -> None:
        """Log records; errors by type alone when ``redact_errors``."""
        self.redact_errors = redact_errors

    def _describe(self, error: BaseException | None) -> str:
        return describe(error, self.redact_errors)

    def execution_started(self, task: ClaimedTask) -> Any:
        """Make the task's fields current; log the start at DEBUG."""
        token = _current.set((task, None, None))
        if run_log.isEnabledFor(logging.DEBUG):
            what = f"step {task.step_name!r} of " if task.step_name else ""
            run_log.debug(
                "executing %srun %s (%s)", what, task.run_id, task.workflow, extra=task_fields(task)
            )
        return token

    def execution_finished(
        self, task: ClaimedTask, token: Any, outcome: Outcome, seconds: float
    ) -> None:
        """Log the outcome at DEBUG; restore the fields."""
        if run_log.isEnabledFor(logging.DEBUG):
            run_log.debug(
                "run %s: %s after %.3f s", task.run_id, outcome, seconds, extra=task_fields(task)
            )
        _current.reset(token)

    def step_started(self, step: StepAttempt) -> Any:
        """Make the step's fields current."""
        return _current.set((step.task, step.name, step.attempt))

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """Log the attempt: DEBUG when it completed, INFO for a retry, WARNING for a failure."""
        _current.reset(token)
        if status not in ("retrying", "failed") and not step_log.isEnabledFor(logging.DEBUG):
            return
        task, name, attempt = step.task, step.name, step.attempt
        fields = task_fields(task, name, attempt)
        if status == "retrying":
            step_log.info(
                "step %r of run %s failed (attempt %d: %s); it will be retried",
                name,
                task.run_id,
                attempt,
                self._describe(error),
                extra=fields,
            )
        elif status == "failed":
            step_log.warning(
                "step %r of run %s failed for good (attempt %d: %s)",
                name,
                task.run_id,
                attempt,
                self._describe(error),
                extra=fields,
            )
        else:
            step_log.debug(
                "step %r of run %s %s in %.3f s", name, task.run_id, status, seconds, extra=fields
            )

    def run_retrying(self, task: ClaimedTask, delay: float, error: BaseException) -> None:
        """Log at INFO."""
        run_log.info(
            "run %s failed (%s); retrying in %.1f s",
            task.run_id,
            self._describe(error),
            delay,
            extra=task_fields(task),
        )

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None
    ) -> None:
        """Log at DEBUG when completed or continued, INFO when compensated, else WARNING."""
        quiet = {"completed": logging.DEBUG, "continued": logging.DEBUG}
        level = quiet.get(status, logging.INFO if status == "compensated" else logging.WARNING)
        if run_log.isEnabledFor(level):
            # A graph run ends inside one of its step tasks: the record is
            # about the run, with the claim's attempt, not the step's.
            current = _current.get()
            fields = task_fields(current[0]) if current else dict.fromkeys(LOG_FIELDS)
            fields.update(run_id=run_id, workflow=workflow, step=None)
            detail = f": {self._describe(error)}" if error is not None else ""
            run_log.log(level, "run %s (%s) %s%s", run_id, workflow, status, detail, extra=fields)

    def lease_lost(self, task: ClaimedTask) -> None:
        """Log at WARNING."""
        fence = task.fence
        lost = LeaseLost(fence.task_id, fence.worker_id, fence.attempt)
        run_log.warning("run %s: %s", task.run_id, lost, extra=task_fields(task))


def describe(error: BaseException | None, redact: bool = False) -> str:
    """``Type: message`` of ``error``; its type alone (and ``message redacted``) if ``redact``."""
    if error is None:
        return "no error"
    if redact:
        return f"{type(error).__name__} (message redacted: payloads are encrypted)"
    return f"{type(error).__name__}: {error}"
