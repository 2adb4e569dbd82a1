"""Plain data types that perdure returns: runs, steps, history events, statuses."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
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
    }
)


class StepStatus(enum.StrEnum):
    """A step checkpoint's state: final (completed, failed, skipped, cancelled, timed out)
    or not yet (pending: queued as a parallel step; retrying: between attempts;
    waiting: at a durable wait)."""

    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    WAITING = "waiting"
    TIMED_OUT = "timed_out"
    #: A graph step whose condition (or a dependency's) said no.
    SKIPPED = "skipped"
    #: A parallel step dropped before it started, because its run failed.
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
    #: True for a run `perdure prune --archive` moved to the archive tables.
    archived: bool = False


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
class RunFilter:
    """Which runs a listing selects; a field left None selects any value.

    ``before`` is exclusive, ``since`` inclusive (both on ``created_at``).
    """

    status: str | None = None
    workflow: str | None = None
    version: int | None = None
    queue: str | None = None
    worker: str | None = None
    key_prefix: str | None = None
    since: datetime | None = None
    before: datetime | None = None
    parent: str | None = None


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
