"""Plain data types that perdure returns: runs, steps, history events, statuses."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


class RunStatus(enum.StrEnum):
    """Where a run is in its life: live (queued ... compensating) or final."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    PAUSED = "paused"
    #: Failed for good; its compensations are running.
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Failed for good, and every compensation of its completed steps ran.
    COMPENSATED = "compensated"
    #: Failed for good, and a compensation failed too: needs a human.
    COMPENSATION_FAILED = "compensation_failed"
    #: Ended by ``ctx.continue_as_new``: its successor (``continued_to``) goes on.
    CONTINUED = "continued"

    @property
    def is_final(self) -> bool:
        """True when the run will not move again by itself."""
        return self in FINAL_STATUSES

    @property
    def is_failure(self) -> bool:
        """True for the final statuses of a run that failed (compensated or not)."""
        return self in (
            RunStatus.FAILED,
            RunStatus.COMPENSATED,
            RunStatus.COMPENSATION_FAILED,
        )


FINAL_STATUSES = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.COMPENSATED,
        RunStatus.COMPENSATION_FAILED,
        RunStatus.CONTINUED,
    }
)


class StepStatus(enum.StrEnum):
    """A step checkpoint's state: final (completed, failed, skipped, cancelled, timed out)
    or not yet (pending: queued as a step task; retrying: between attempts;
    waiting: at a durable wait)."""

    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    WAITING = "waiting"
    TIMED_OUT = "timed_out"
    #: A graph step whose condition (or a dependency's) said no.
    SKIPPED = "skipped"
    #: A step task dropped before it started, because its run failed.
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Run:
    """One execution of a workflow, as recorded in the ``runs`` table."""

    id: str
    workflow: str
    version: int
    queue: str
    key: str | None
    status: RunStatus
    input: Any
    output: Any
    error: dict[str, Any] | None
    worker_id: str | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    updated_at: datetime
    parent_run_id: str | None = None
    steps_completed: int | None = None
    waiting_for: dict[str, Any] | None = None
    #: The schedule that started the run and the tick it covers, if one did.
    schedule: str | None = None
    scheduled_at: datetime | None = None
    #: Higher runs are claimed first; FIFO within a priority.
    priority: int = 0
    #: Counted against its queue's partition_concurrency (and per-key rate limit).
    partition_key: str | None = None
    #: At most one run per (queue, dedup_key) waits to start.
    dedup_key: str | None = None
    #: Searchable attributes: ``list_runs(tags=...)``, ``perdure runs list --tag``.
    tags: dict[str, str] | None = None
    #: The run this one restarts (``app.restart``): same workflow version and input.
    restarted_from: str | None = None
    #: The run this one was forked from (``app.fork``), and the step it forked at.
    forked_from: str | None = None
    fork_step: str | None = None
    #: The run this one continues (``ctx.continue_as_new``), and the run that continues it.
    continued_from: str | None = None
    continued_to: str | None = None
    #: True for a run `perdure prune --archive` moved to the archive tables.
    archived: bool = False


@dataclass(frozen=True)
class RunRef:
    """A run as bulk operations report it: enough to recognise it, no payloads."""

    id: str
    workflow: str
    version: int
    status: RunStatus
    key: str | None
    created_at: datetime


@dataclass(frozen=True)
class BulkResult:
    """What ``app.cancel_runs`` / ``app.retry_runs`` matched, or did.

    With ``dry_run`` True, ``runs`` are the runs the operation would act on
    now and nothing changed. Otherwise ``runs`` are the runs it acted on, and
    ``skipped`` those it matched but found in another state when it came to
    them (a run that finished or was retried meanwhile), left as they were.
    """

    operation: str
    dry_run: bool
    runs: list[RunRef]
    skipped: list[RunRef] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many runs were matched (dry run) or acted on."""
        return len(self.runs)


@dataclass(frozen=True)
class Step:
    """One step checkpoint of a run."""

    position: int
    name: str
    kind: str
    status: StepStatus
    attempts: int
    output: Any
    error: dict[str, Any] | None
    worker_id: str | None
    started_at: datetime
    completed_at: datetime | None
    wake_at: datetime | None = None

    @property
    def duration(self) -> float | None:
        """Seconds from the last attempt's start to its checkpoint, if it finished."""
        if self.completed_at is None:
            return None
        return (self.completed_at - self.started_at).total_seconds()


@dataclass(frozen=True)
class HistoryEvent:
    """One entry of a run's append-only history."""

    id: int
    at: datetime
    event: str
    step_position: int | None
    step_name: str | None
    attempt: int | None
    worker_id: str | None
    detail: dict[str, Any] | None = field(default=None)
    #: Seconds taken by what this entry ends: a step attempt, or the run.
    duration: float | None = None


@dataclass(frozen=True)
class EventToEmit:
    """One event of ``app.emit_many``: its name, its payload (a JSON value; None: ``{}``)
    and its idempotency key (None: every emit is a new event), as ``app.emit`` takes them."""

    name: str
    payload: Any = None
    key: str | None = None


@dataclass(frozen=True)
class EmittedEvent:
    """An event recorded by ``app.emit`` (or ``emit_event`` in SQL), as a wait receives it.

    Not a run's published value (``ctx.set_event``): an emitted event belongs
    to the application, and starts or wakes the runs that wait on a match of it.
    """

    id: int
    name: str
    #: The emitter's idempotency key, if it gave one.
    key: str | None
    payload: Any
    emitted_at: datetime

    @staticmethod
    def from_record(record: dict[str, Any]) -> EmittedEvent:
        """The event of a wait's recorded output (the JSON object emit_event stores)."""
        at = record["emitted_at"]
        return EmittedEvent(
            id=int(record["id"]),
            name=str(record["name"]),
            key=record.get("key"),
            payload=record.get("payload"),
            emitted_at=at if isinstance(at, datetime) else datetime.fromisoformat(str(at)),
        )


@dataclass(frozen=True)
class Winner:
    """What won a race of waits (``ctx.wait_first``): the member's name and its value.

    The value is a signal's payload, the ``EmittedEvent`` of an event, None for
    a timer, a child run's output, or an update's payload.
    """

    name: str
    value: Any


@dataclass(frozen=True)
class EventTrigger:
    """Start a run of the workflow for each event ``name`` whose payload contains ``match``.

    Given to ``@app.workflow(..., on_event=...)``. The run's input is the
    event's payload; its key is ``event:<event id>:<workflow>``, so each event
    starts one run of the workflow, exactly once.

    With ``batch_size`` and ``batch_window`` (seconds or a timedelta), the
    matching events gather instead: one run starts when ``batch_size`` of
    them are in, or when ``batch_window`` has passed since the first, with
    the list of the events as its input (each a dict ``id``, ``name``,
    ``key``, ``payload``, ``emitted_at``; key ``event-batch:<first event
    id>:<workflow>``). Each event is in exactly one batch.
    """

    name: str
    match: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    batch_window: float | timedelta | None = None

    @property
    def batched(self) -> bool:
        """Whether matching events gather in batches rather than start a run each."""
        return self.batch_size is not None or self.batch_window is not None


class RunPage(list[Run]):
    """One page of a run listing, newest first: a list of runs plus ``next_cursor``.

    ``next_cursor`` is None on the last page; otherwise pass it as
    ``list_runs(cursor=...)`` (or ``perdure runs list --cursor``) for the
    page after this one.
    """

    def __init__(self, runs: Iterable[Run] = (), next_cursor: str | None = None) -> None:
        """A page holding ``runs``, followed by the page at ``next_cursor``."""
        super().__init__(runs)
        self.next_cursor = next_cursor


@dataclass(frozen=True)
class PruneResult:
    """What one retention pass did (or, in a dry run, would do)."""

    #: Runs that finished before this time were pruned.
    cutoff: datetime
    #: Runs deleted or archived (in a dry run: that would be).
    runs: int
    #: Transactions it took, one per batch (0 in a dry run).
    batches: int
    #: True when the runs were moved to the archive tables.
    archived: bool
    dry_run: bool
    #: History partitions dropped (in a dry run: that would be), oldest first.
    partitions: list[str] = field(default_factory=list)
    #: True when a partition could not be dropped for a lock held too long by
    #: writers of history; the next pass tries again.
    postponed: bool = False
    #: Emitted events (app.emit) recorded before the cutoff, deleted (0 in a dry run).
    events: int = 0
    #: Audit entries older than the cutoff deleted (in a dry run: 0); None when
    #: the pass ran as a role other than the schema's owner, which keeps them.
    audit: int | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One action recorded in the audit record (``App.audit_log``, ``perdure audit list``).

    Who (``actor``: a token's name, a proxy's user, or the CLI's OS user or
    ``--as``; ``via``: token, proxy, cli or open, for a dashboard without a
    token on loopback), with which ``role``, from which ``source`` (dashboard,
    api, cli) and ``address``, did what (``action``) to which ``runs``, when
    (``at``), and the ``outcome``: ok, refused (the role may not) or error.
    ``detail`` holds names (a signal's, a schedule's) and error messages,
    never payloads or tokens.
    """

    id: int
    at: datetime
    actor: str
    via: str
    role: str | None
    source: str
    address: str | None
    action: str
    runs: list[str]
    outcome: str
    detail: dict[str, Any] | None


@dataclass(frozen=True)
class QueueInfo:
    """A queue: its limits (None: no limit) and its tasks by state."""

    name: str
    #: Tasks of this queue running at once across every worker, at most.
    concurrency: int | None
    #: Tasks of this queue one worker runs at once, at most.
    worker_concurrency: int | None
    #: Due now, waiting for a worker.
    ready: int
    #: Claimed by a worker.
    running: int
    #: Due later: durable sleeps, signal timeouts, retry backoffs.
    waiting: int
    paused: int
    #: When the settings last changed; None for a queue without settings.
    updated_at: datetime | None
    #: Tasks of one partition key running at once, at most.
    partition_concurrency: int | None = None
    #: Tasks claimed per ``rate_period`` seconds, at most (per key if ``rate_per_key``).
    rate_limit: int | None = None
    rate_period: float | None = None
    rate_per_key: bool = False
    #: How long the oldest ready task has been due, in seconds; None when none is.
    oldest_seconds: float | None = None

    @property
    def depth(self) -> int:
        """Tasks due now and waiting for a worker (the same as ``ready``)."""
        return self.ready


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as recorded in the ``workers`` table."""

    id: str
    host: str
    pid: int
    queues: list[str]
    workflows: list[str]
    concurrency: int
    status: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    held: int
    #: Threads still running a ``def`` step that timed out (or whose run this
    #: worker lost); each holds one of the worker's slots until it returns.
    stuck_threads: int = 0


@dataclass(frozen=True)
class WorkflowInfo:
    """A registered workflow version with its run counts by status."""

    name: str
    version: int
    queue: str
    kind: str
    updated_at: datetime
    counts: dict[str, int]
    #: What the registry records: for a graph, its steps and edges.
    definition: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    #: Live workers that have this version's code, so claim its runs.
    workers: list[str] = field(default_factory=list)
    #: True when ``counts`` are those of the workflow's newest runs only (the
    #: listing counts at most 10,000 runs per workflow, so its cost is bounded).
    counts_capped: bool = False
    #: Unfinished runs of this version that no live worker serves on their
    #: queue (see [`App.stranded`][perdure.App.stranded]); 0 when served.
    stranded: int = 0


@dataclass(frozen=True)
class StrandedVersion:
    """A workflow version with unfinished runs that no live worker can claim.

    No worker that is running, with a fresh heartbeat, has this version's code
    on the runs' queue, so they wait. ``served`` are the versions of the
    workflow live workers do serve: where [`App.move_runs`][perdure.App.move_runs]
    can move the runs that have recorded nothing yet.
    """

    workflow: str
    version: int
    #: How many unfinished runs wait.
    runs: int
    #: The queues they wait on.
    queues: list[str]
    #: The versions of this workflow that live workers serve (any queue).
    served: list[int]

    @property
    def message(self) -> str:
        """One sentence for an operator: what waits, and what live workers serve."""
        noun = "run" if self.runs == 1 else "runs"
        verb = "waits" if self.runs == 1 else "wait"
        served = (
            "live workers serve version " + ", ".join(str(v) for v in self.served)
            if self.served
            else "no live worker serves this workflow"
        )
        return (
            f"{self.runs} {noun} of {self.workflow}@{self.version} {verb} for a worker "
            f"that serves version {self.version}; {served}"
        )


@dataclass(frozen=True)
class SkippedRun:
    """A run ``app.move_runs`` left where it was, and why."""

    run_id: str
    #: "recorded": it has recorded steps (it stays pinned to its version);
    #: "held": a worker is executing it; "not movable": it is not an
    #: unfinished run of the workflow version (finished, another version, unknown).
    reason: str


@dataclass(frozen=True)
class MovedRuns:
    """What [`App.move_runs`][perdure.App.move_runs] moved, or would move with ``dry_run``."""

    workflow: str
    from_version: int
    to_version: int
    dry_run: bool
    #: The ids of the runs moved (with ``dry_run``: that would be moved now).
    moved: list[str]
    #: The runs matched or named but left pinned, each with its reason.
    skipped: list[SkippedRun] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many runs were moved (or would be)."""
        return len(self.moved)


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as recorded in the ``schedules`` table. Times are aware, in UTC."""

    name: str
    #: The cron expression, read on the wall clock of ``timezone``.
    cron: str
    timezone: str
    #: The workflow each tick starts (its newest registered version), and its input.
    workflow: str
    input: Any
    #: What happens to ticks missed while no worker ran: "latest", "all" or "skip".
    catchup: str
    max_catchup: int
    #: "code" (declared with @app.schedule) or "api" (app.add_schedule).
    source: str
    paused: bool
    #: The first tick not yet started.
    next_tick: datetime
    #: The last tick started, and its run.
    last_tick: datetime | None
    last_run_id: str | None
    created_at: datetime
    updated_at: datetime
