"""Turn result rows (dicts) into perdure's data types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar

from perdure.store import codec
from perdure.types import (
    AuditEntry,
    HistoryEvent,
    QueueInfo,
    Run,
    RunStatus,
    ScheduleInfo,
    Step,
    StepStatus,
    WorkerInfo,
    WorkflowInfo,
)

Row = dict[str, Any]


@dataclass(frozen=True)
class Fence:
    """The lease a worker holds on a task: every write on it carries all three."""

    task_id: int
    worker_id: str
    attempt: int

    def params(self) -> dict[str, Any]:
        """The fence as query parameters."""
        return {"task_id": self.task_id, "worker_id": self.worker_id, "attempt": self.attempt}


@dataclass(frozen=True, slots=True)
class Fenced:
    """The answer to a write fenced on a task's lease.

    ``leased`` False: another worker holds the task now and nothing was
    written (the writer lost its lease). ``written`` False: the lease is the
    writer's, but the step's position already held a final checkpoint, so the
    history the writer replayed from was stale. ``changed`` False: the run
    had already ended (cancelled) and keeps its status. The other fields are
    what particular writes report back.
    """

    leased: bool
    written: bool = True
    changed: bool = True
    #: The run's status after a step checkpoint ('cancelled' and 'paused' matter).
    run_status: str | None = None
    #: When a parked run wakes (a wait), or None.
    wake_at: datetime | None = None
    #: Step tasks a gather created.
    spawned: int = 0
    #: The payload of the signal a wait took (``written``: one was taken).
    payload: Any = None
    #: The statement's time (a wait decides with it whether it timed out).
    db_now: datetime | None = None

    @staticmethod
    def decode(found: list[Row]) -> Fenced:
        """The answer in the first row of a fenced statement's result (none: not leased)."""
        if not found:
            return Fenced(leased=False, written=False, changed=False)
        row = found[0]
        return Fenced(
            leased=bool(row["leased"]),
            written=bool(row.get("written", True)),
            changed=bool(row.get("changed", True)),
            run_status=row.get("run_status"),
            wake_at=row.get("wake_at"),
            spawned=int(row.get("spawned") or 0),
            payload=row.get("payload"),
            db_now=row.get("db_now"),
        )

    @staticmethod
    def decode_each(found: list[Row]) -> list[Fenced]:
        """One answer per row of a fenced statement over arrays (a row per input, in order)."""
        return [
            Fenced(
                leased=bool(row["leased"]),
                written=bool(row.get("written", True)),
                changed=bool(row.get("changed", True)),
                run_status=row.get("run_status"),
            )
            for row in found
        ]


@dataclass(frozen=True)
class _Claimed:
    """What every claimed task carries: its lease, its run, how to execute it."""

    fence: Fence
    run_id: str
    workflow: str
    version: int
    queue: str
    input: Any
    failures: int
    lapses: int
    #: True when the run was cancelled or paused while the task was claimed.
    finished: bool = False
    #: The database clock at the claim: what waits compare their wake time with.
    db_now: datetime | None = None
    #: The run's status when the task was claimed ('compensating' matters).
    run_status: str | None = None
    #: The schedule that started the run and the tick it covers, if one did.
    schedule: str | None = None
    scheduled_at: datetime | None = None
    #: The trace propagation headers the run was started with, if any.
    trace_context: dict[str, str] | None = None
    #: The checkpoints to replay with, when the worker read them for a whole
    #: claim at once (step_list_claimed_now); None: the execution reads them.
    steps: tuple[Step, ...] | None = None


@dataclass(frozen=True)
class RunTask(_Claimed):
    """A run's own task (kind 'run'): replay the run and take it to its next stop."""

    kind: ClassVar[str] = "run"
    #: A run's own task is for no one step.
    step_name: ClassVar[str | None] = None


@dataclass(frozen=True)
class StepTask(_Claimed):
    """The task of one step (kind 'step'): a gather's step task, or a graph's step."""

    kind: ClassVar[str] = "step"
    #: The step's position and name.
    step_position: int = field(kw_only=True)
    step_name: str = field(kw_only=True)
    #: For a gather's step task: the position of its gather's first step.
    gather_start: int | None = field(default=None, kw_only=True)

    @classmethod
    def of(
        cls,
        task: _Claimed,
        claimed: ClaimedStepTask,
        *,
        gather_start: int | None,
        steps: Sequence[Step] | None,
    ) -> StepTask:
        """The task of ``claimed``: a step of ``task``'s run, claimed and leased on its
        own, replaying ``steps`` (None: the execution reads them)."""
        shared = {f.name: getattr(task, f.name) for f in fields(_Claimed)}
        shared.update(fence=claimed.fence, steps=None if steps is None else tuple(steps))
        return cls(
            **shared,
            step_position=claimed.position,
            step_name=claimed.name,
            gather_start=gather_start,
        )


#: A task this worker just claimed, with what is needed to execute it.
ClaimedTask = RunTask | StepTask


@dataclass(frozen=True, slots=True)
class ClaimedStepTask:
    """A step task of a gather claimed by the worker that parked the run there."""

    fence: Fence
    position: int
    name: str
    #: Attempts the step already made (0 for a step never tried).
    attempts: int

    @staticmethod
    def decode(found: list[Row]) -> list[ClaimedStepTask]:
        """One per claimed row, in position order."""
        claimed = [
            ClaimedStepTask(
                Fence(int(r["task_id"]), str(r["worker_id"]), int(r["attempt"])),
                int(r["step_position"]),
                str(r["step_name"]),
                int(r["step_attempts"] or 0),
            )
            for r in found
        ]
        return sorted(claimed, key=lambda g: g.position)


@dataclass(frozen=True, slots=True)
class StepTaskCompletion:
    """A claimed step task that completed: what its checkpoint records."""

    step: ClaimedStepTask
    attempts: int
    output_json: str
    started_at: datetime


@dataclass(frozen=True)
class Queueing:
    """How a new run queues, beyond its priority: partition key, dedup key, tags (JSON)."""

    partition_key: str | None = None
    dedup_key: str | None = None
    tags_json: str | None = None


@dataclass(frozen=True)
class StartResult:
    """The answer of ``run_insert``: the run, and whether this call created it."""

    run_id: str
    workflow: str
    created: bool
    #: The workflow is registered nowhere (a ``run_insert`` with ``lookup``).
    unknown_workflow: bool = False


def start_result(r: Row) -> StartResult:
    """A ``run_insert`` or ``run_debounce`` row as a StartResult."""
    if r["id"] is None:
        return StartResult("", r["workflow"], False, unknown_workflow=True)
    return StartResult(str(r["id"]), r["workflow"], bool(r["created"]))


def run(r: Row) -> Run:
    """A ``runs`` row as a Run."""
    return Run(
        id=str(r["id"]),
        workflow=r["workflow"],
        version=r["version"],
        queue=r["queue"],
        key=r["key"],
        status=RunStatus(r["status"]),
        input=r["input"],
        output=r["output"],
        error=codec.record(r["error"]),
        worker_id=r["worker_id"],
        created_at=r["created_at"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        updated_at=r["updated_at"],
        parent_run_id=str(r["parent_run_id"]) if r.get("parent_run_id") else None,
        steps_completed=r.get("steps_completed"),
        waiting_for=r.get("waiting_for"),
        schedule=r.get("schedule"),
        scheduled_at=r.get("scheduled_at"),
        priority=r.get("priority", 0),
        partition_key=r.get("partition_key"),
        dedup_key=r.get("dedup_key"),
        tags=r.get("tags"),
        restarted_from=_text(r.get("restarted_from")),
        forked_from=_text(r.get("forked_from")),
        fork_step=r.get("fork_step"),
        continued_from=_text(r.get("continued_from")),
        continued_to=_text(r.get("continued_to")),
        archived=bool(r.get("archived", False)),
    )


def _text(value: Any) -> str | None:
    """A uuid (or other) column as text; None stays None."""
    return None if value is None else str(value)


def step(r: Row) -> Step:
    """A ``steps`` row as a Step."""
    return Step(
        position=r["position"],
        name=r["name"],
        kind=r["kind"],
        status=StepStatus(r["status"]),
        attempts=r["attempts"],
        output=r["output"],
        error=codec.record(r["error"]),
        worker_id=r["worker_id"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        wake_at=r.get("wake_at"),
    )


def history(r: Row) -> HistoryEvent:
    """A ``history`` row as a HistoryEvent."""
    return HistoryEvent(
        id=r["id"],
        at=r["at"],
        event=r["event"],
        step_position=r["step_position"],
        step_name=r["step_name"],
        attempt=r["attempt"],
        worker_id=r["worker_id"],
        detail=codec.record(r["detail"]),
        duration=None if r.get("duration") is None else r["duration"].total_seconds(),
    )


def queue(r: Row) -> QueueInfo:
    """A ``queue_list`` row as a QueueInfo: its columns are the fields, by name."""
    return QueueInfo(**{f.name: r[f.name] for f in fields(QueueInfo)})


def schedule(r: Row) -> ScheduleInfo:
    """A ``schedules`` row as a ScheduleInfo."""
    values = {f.name: r[f.name] for f in fields(ScheduleInfo)}
    values["last_run_id"] = str(r["last_run_id"]) if r["last_run_id"] else None
    return ScheduleInfo(**values)


def worker(r: Row) -> WorkerInfo:
    """A ``workers`` row (with its held count) as a WorkerInfo."""
    return WorkerInfo(
        id=r["id"],
        host=r["host"],
        pid=r["pid"],
        queues=list(r["queues"]),
        workflows=list(r["workflows"]),
        concurrency=r["concurrency"],
        status=r["status"],
        started_at=r["started_at"],
        heartbeat_at=r["heartbeat_at"],
        stopped_at=r["stopped_at"],
        held=int(r["held"]),
        stuck_threads=int(r["stuck_threads"]),
    )


def workflow(r: Row) -> WorkflowInfo:
    """A ``workflows`` row (with counts) as a WorkflowInfo."""
    return WorkflowInfo(
        name=r["name"],
        version=r["version"],
        queue=r["queue"],
        kind=r["kind"],
        updated_at=r["updated_at"],
        counts={k: int(v) for k, v in (r["counts"] or {}).items()},
        definition=r.get("definition") or {},
        fingerprint=r.get("fingerprint"),
        workers=list(r.get("workers") or []),
        counts_capped=bool(r.get("counts_capped")),
    )


def claimed_task(r: Row, worker_id: str) -> ClaimedTask:
    """A ``task_claim`` row as a RunTask or, for a row of kind 'step', a StepTask."""
    common = dict(
        fence=Fence(task_id=int(r["id"]), worker_id=worker_id, attempt=int(r["attempt"])),
        run_id=str(r["run_id"]),
        workflow=r["workflow"],
        version=r["version"],
        queue=r["queue"],
        input=r["input"],
        failures=int(r["failures"]),
        lapses=int(r["lapses"]),
        finished=bool(r.get("finished")),
        db_now=r.get("db_now"),
        run_status=r.get("run_status"),
        schedule=r.get("schedule"),
        scheduled_at=r.get("scheduled_at"),
        # Only telemetry: a value that cannot be read is dropped, not fatal.
        trace_context=r.get("trace_context") if isinstance(r.get("trace_context"), dict) else None,
    )
    if r["kind"] == "step":
        return StepTask(
            **common,
            step_position=int(r["step_position"]),
            step_name=str(r["step_name"]),
            gather_start=r.get("gather_start"),
        )
    return RunTask(**common)


def audit_entry(r: Row) -> AuditEntry:
    """An ``audit`` row as an AuditEntry: its columns are the fields, by name."""
    values = {f.name: r[f.name] for f in fields(AuditEntry)}
    values["runs"] = list(r["runs"] or [])
    return AuditEntry(**values)
