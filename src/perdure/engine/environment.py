"""What the executions of one worker share: the store, the threads, the observer.

``ExecutionEnv`` is built once by the worker and handed to every execution;
``WorkflowSpec`` is what the engine needs of a workflow definition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from perdure.engine import serialization
from perdure.engine.commit import Committer
from perdure.engine.control import ReplayEnd
from perdure.engine.observer import Observer
from perdure.engine.retry import RetryPolicy
from perdure.engine.unheld import Unheld
from perdure.store import session
from perdure.store.rows import ClaimedTask, Fenced
from perdure.store.store import AsyncStore
from perdure.store.writes import Checkpoint, Completion

T = TypeVar("T")
#: The execution a spec's body runs in (engine.executor.Execution); generic
#: here so that this module, below the executor, need not import it.
E = TypeVar("E", contravariant=True)


class WorkflowSpec(Protocol[E]):
    """What the engine needs of a workflow definition (the api layer provides it)."""

    name: str
    version: int
    queue: str
    retry: RetryPolicy

    async def invoke(self, execution: E, input: Any) -> Any:
        """Run the workflow body for ``execution`` with ``input``."""

    def rebuild_result(self, output: Any) -> Any:
        """A decoded result as the workflow declares it; InvalidPayload if it does not fit."""


@dataclass
class ExecutionEnv:
    """What every execution on one worker shares.

    A replay against recorded history alone (``perdure check-replay``) has no
    store (``db`` None): any I/O it would do ends the replay (ReplayEnd).
    """

    db: AsyncStore | None
    lease_seconds: float
    threads: Executor
    max_payload_bytes: int = serialization.DEFAULT_MAX_PAYLOAD_BYTES
    sync_pool: session.SyncPool | None = None
    #: Tasks the heartbeat found taken away; their executions stop at the next ctx call.
    lost_tasks: set[int] = field(default_factory=set)
    #: The workflows this worker has code for, by (name, version): child runs
    #: of these start without a registry lookup.
    specs: Mapping[tuple[str, int], WorkflowSpec[Any]] = field(default_factory=dict)
    #: Told of claims, executions, steps and how runs end (metrics, traces, logs).
    observer: Observer = field(default_factory=Observer)
    #: Group commit of the worker's checkpoints (None: each is written alone).
    committer: Committer | None = None
    #: Tasks the worker executes at once: an execution that runs a batch of
    #: step tasks in its one slot runs at most this many at a time.
    concurrency: int = 64
    #: Report the clock, randomness and UUIDs read directly in a workflow body
    #: (engine.nondeterminism).
    detect_nondeterminism: bool = False
    #: Batches of step tasks still running after the execution that
    #: claimed them moved on (a gather that failed fast); the worker waits
    #: for them, then cancels them, before it stops (engine.parallel.wind_down).
    background: set[asyncio.Task[None]] = field(default_factory=set)
    #: The tasks this worker holds beside its claim loop's, and the recovery of
    #: claims whose answer was lost (engine.unheld).
    unheld: Unheld = field(default_factory=Unheld)

    @property
    def store(self) -> AsyncStore:
        """The worker's store; a replay with none ends where I/O would begin (ReplayEnd)."""
        if self.db is None:
            raise ReplayEnd("a replay reads and writes nothing")
        return self.db

    def write(self, unit: Checkpoint | Completion) -> Awaitable[Fenced]:
        """Commit one checkpoint or completion (fenced on its task), in a transaction
        shared with other runs' if a committer is running; what to await for its answer
        (the committer's future itself: no coroutine of its own)."""
        if self.committer is not None:
            return self.committer.submit(unit)
        return self._write_alone(unit)

    async def _write_alone(self, unit: Checkpoint | Completion) -> Fenced:
        if isinstance(unit, Checkpoint):
            return (await self.store.write_checkpoints([unit]))[0]
        return (await self.store.complete_runs([unit]))[0]

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None = None
    ) -> None:
        """This worker ended a run with ``status``: tell the observer."""
        self.observer.run_finished(run_id, workflow, status, error)

    def lease_lost(self, task: ClaimedTask) -> None:
        """A fenced write on ``task`` found another owner: tell the observer."""
        self.observer.lease_lost(task)

    def get_sync_pool(self) -> session.SyncPool:
        """A small sync pool for ``ctx.transaction`` steps written as plain ``def``."""
        if self.sync_pool is None:
            self.sync_pool = self.store.sync_pool(
                max(2, self.store.pool.max_size // 2), f"{self.store.pool.name}-tx"
            )
        return self.sync_pool
