"""The writes the engine hands the store, as records of data: checkpoints, completions,
starts and releases.

Each is a plain record: the fence it is written under, what it records, what
it publishes. The store turns a list of them into the one statement of its
kind (``statements.steps.checkpoints``, ``statements.runs.complete``,
``statements.runs.insert``, ``statements.tasks.release``), which takes its
columns as arrays: a single write is a list of one, and the group commit
writes the records of many runs in one call per kind. Nobody outside the
store builds or reads a write's SQL parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from perdure.store.rows import Fence, Queueing

#: The queueing of a start without partition key, dedup key or tags.
PLAIN = Queueing()

#: The history event of a checkpoint, by its status.
CHECKPOINT_EVENTS = {
    "completed": "step_completed",
    "failed": "step_failed",
    "retrying": "step_retry_scheduled",
    "timed_out": "signal_timed_out",
}
#: A wait for an emitted event that timed out (kind 'event_wait') says so.
EVENT_WAIT_TIMED_OUT = "event_wait_timed_out"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A step's outcome at its position, fenced on the task that ran it.

    ``status`` is 'completed', 'failed', 'retrying' or 'timed_out'. A checkpoint
    of kind 'event' also publishes its output as event ``event_key``; one of kind
    'stream' appends it to stream ``event_key`` at ``stream_seq``. A checkpoint
    that ``ends_task`` is a step task's final one: it deletes the step's
    task and wakes the run when it is the last (at once with ``wake``).
    """

    fence: Fence
    position: int
    name: str
    kind: str
    status: str
    #: The attempt this outcome is of (1 on the first try).
    attempts: int
    started_at: datetime
    output_json: str | None = None
    error_json: str | None = None
    #: The task's lease is extended by this many seconds.
    lease_seconds: float = 0.0
    event_key: str | None = None
    stream_seq: int | None = None
    stream_closed: bool = False
    ends_task: bool = False
    wake: bool = False

    @property
    def event(self) -> str:
        """The history event this checkpoint writes."""
        if self.status == "timed_out" and self.kind == "event_wait":
            return EVENT_WAIT_TIMED_OUT
        return CHECKPOINT_EVENTS[self.status]


@dataclass(frozen=True, slots=True)
class Completion:
    """A run finished with its output, by the task that holds it; with ``last``, the
    run's last step's checkpoint (a completed plain step) is written with it."""

    fence: Fence
    output_json: str
    last: Checkpoint | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """A held task given back, due after ``delay_seconds``: a retry's backoff
    (``failed`` counts the body's failure), a wait, a shutdown; parked if ``paused``."""

    fence: Fence
    event: str
    delay_seconds: float = 0.0
    failed: bool = False
    detail_json: str | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    """A run to start with its first task, or to find by ``key``.

    ``queueing`` carries the partition key, dedup key and tags; with ``newest``,
    a newer version registered in the database replaces ``version`` (and its
    queue replaces ``queue``). With ``lookup`` (a caller without the workflow's
    code: ``queue`` None), the version and queue come from the registered
    workflows, and an unregistered one writes nothing. Starts written in one
    statement share their ``shape``: all but the id, key and input.
    """

    run_id: str
    workflow: str
    version: int
    queue: str | None
    key: str | None
    input_json: str
    priority: int = 0
    delay_seconds: float = 0.0
    parent_run_id: str | None = None
    timeout_seconds: float | None = None
    queueing: Queueing = PLAIN
    trace_context_json: str | None = None
    newest: bool = False
    lookup: bool = False

    @property
    def shape(self) -> tuple[Any, ...]:
        """What starts written together share."""
        return (
            self.workflow,
            self.version,
            self.queue,
            self.priority,
            self.delay_seconds,
            self.parent_run_id,
            self.timeout_seconds,
            self.queueing,
            self.trace_context_json,
            self.newest,
            self.lookup,
        )
