"""The fenced writes of one execution: checkpoints, releases and transactions.

An execution does not reach for the store itself: it is handed a
``FencedWriter`` for its task when it is made, and every write it does to
record its progress goes through it, fenced on the task's lease. What kind
of execution it is (a run's own task, a parallel or graph step's task, a
step run in a batch) is told to the writer once, by whoever makes it:

- ``holds``: a completed step's checkpoint may be held back (group commit,
  or a batch whose completions are written together; engine.deferred);
- ``on_step_final``: called in the transaction of a step task's final
  checkpoint, under the run's row lock (a graph decides there what runs next).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from perdure.engine.environment import ExecutionEnv
from perdure.store.rows import Fence, Fenced
from perdure.store.store import execute_async, execute_sync
from perdure.store.writes import Checkpoint, Release

#: Called with the open connection in a step task's final checkpoint's transaction.
OnStepFinal = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class FencedWriter:
    """Writes fenced on one task's lease (``fence``, of run ``run_id``), for the
    execution of that task, through ``env``'s store."""

    env: ExecutionEnv
    fence: Fence
    run_id: str
    #: A completed step's checkpoint may be held back (engine.deferred).
    holds: bool = field(default=False, kw_only=True)
    #: Called in the transaction of a step task's final checkpoint.
    on_step_final: OnStepFinal | None = field(default=None, kw_only=True)

    def record(self, checkpoint: Checkpoint, conn: Any = None) -> Awaitable[Fenced]:
        """Commit ``checkpoint`` (on ``conn``, in its transaction, if given); what to
        await for the answer.

        A checkpoint that neither ends the task nor joins a transaction goes
        straight to the worker's group commit: its awaitable is the commit's
        own future, with no coroutine of the writer's around it.
        """
        if not checkpoint.ends_task and conn is None:
            return self.env.write(checkpoint)
        return self._record(checkpoint, conn)

    async def _record(self, checkpoint: Checkpoint, conn: Any) -> Fenced:
        statements = self.env.store.statements
        if conn is not None:
            return await execute_async(conn, statements.steps.write(checkpoint))
        # Under the run's row lock: sibling completions serialise, and the
        # last one sees every other one's commit when it decides to wake.
        async with self.env.store.transaction() as conn:
            await execute_async(conn, statements.runs.lock(self.run_id))
            result = await execute_async(conn, statements.steps.finish_step_task(checkpoint))
            if result.leased and self.on_step_final is not None:
                await self.on_step_final(conn)
        return result

    def record_sync(self, checkpoint: Checkpoint, conn: Any) -> Fenced:
        """Commit ``checkpoint`` on the sync ``conn``, in its transaction; the answer."""
        return execute_sync(conn, self.env.store.statements.steps.write(checkpoint))

    async def release(self, release: Release) -> bool:
        """Hand the task back as ``release`` says; whether the lease was still ours."""
        (released,) = await self.env.store.release_tasks([release])
        return released

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[tuple[Any, bool]]:
        """A transaction with the task's row locked: ``(conn, whether the lease is ours)``."""
        statements = self.env.store.statements
        async with self.env.store.transaction() as conn:
            yield conn, await execute_async(conn, statements.tasks.lock_fenced(self.fence))

    @contextlib.contextmanager
    def transaction_sync(self) -> Iterator[tuple[Any, bool]]:
        """The blocking form of ``transaction``, on a small sync pool (a plain ``def``)."""
        store, pool = self.env.store, self.env.get_sync_pool()
        with store.reachable(), pool.connection() as conn, conn.transaction():
            yield conn, execute_sync(conn, store.statements.tasks.lock_fenced(self.fence))
