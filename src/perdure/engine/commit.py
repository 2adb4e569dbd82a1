"""Group commit: the checkpoints of a worker's concurrent runs share transactions.

Each execution hands its fenced writes to the worker's ``Committer`` and
waits for them to commit. The committer sends whatever is waiting as one
pipelined transaction (one round trip, one commit, one WAL flush for all of
them), and while that is in flight the next writes gather for the next one.
Nothing waits on purpose: at low load a write goes alone at once, under load
they go together. When every lane is free and many units wait, a lane takes
half of them and leaves the rest to the next: the server then works on one
half while the worker reads the other's answers and runs the next steps, so
the worker and PostgreSQL keep two cores busy instead of taking turns.

Each unit is one record of one run: a step's checkpoint, or the run's
completion (with its last checkpoint). The lane writes the units it takes
with one call per kind (``AsyncStore.write_batch``: one statement for all the
checkpoints, one for all the completions, in one transaction). Units of
different runs share a transaction but not a fate: every record is fenced on
its own task, so a lost lease writes nothing for that unit and leaves the
others alone, and if the shared transaction fails as a whole (a deadlock, a
statement error), each unit is tried again in a transaction of its own, so
that one unit's error is reported to that unit only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable

from perdure.engine.control import Disconnected
from perdure.store.connect import is_unavailable
from perdure.store.rows import Fenced
from perdure.store.store import AsyncStore
from perdure.store.writes import Checkpoint, Completion

log = logging.getLogger("perdure.commit")

#: Units in one transaction at most: a bound on the locks one transaction holds.
MAX_UNITS = 64
#: Below twice this many waiting units, a free lane takes them all.
MIN_SPLIT = 8


#: What one run commits at once: a step's checkpoint, or its completion.
Unit = Checkpoint | Completion
_Queued = tuple[Unit, "asyncio.Future[Fenced]"]


class Committer:
    """Writes the units of many executions, grouped into shared transactions."""

    def __init__(self, store: AsyncStore, lanes: int = 2) -> None:
        """Commit through ``store``, with up to ``lanes`` transactions in flight at once."""
        self.store = store
        self.lanes = lanes
        self._queue: list[_Queued] = []
        self._waiting = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._busy = 0
        #: Transactions committed, and units written (for the worker's counts).
        self.transactions = 0
        self.units = 0

    def start(self) -> None:
        """Start the lanes (each a background task that sends one transaction at a time)."""
        self._tasks = [
            asyncio.create_task(self._lane(), name=f"perdure-commit-{i}") for i in range(self.lanes)
        ]

    async def stop(self) -> None:
        """Stop the lanes; a unit still queued gets ``Disconnected``."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, future in self._queue:
            if not future.done():
                future.set_exception(Disconnected("the worker is stopping"))
        self._queue.clear()

    async def write(self, unit: Unit) -> Fenced:
        """Commit ``unit`` (in a transaction shared with other units); its answer."""
        return await self.submit(unit)

    def submit(self, unit: Unit) -> Awaitable[Fenced]:
        """Queue ``unit`` for the next shared transaction now; what to await for its answer.

        ``write`` without a coroutine of its own: a step's checkpoint is one
        future in the queue, awaited by the execution that wrote it.
        """
        if not self._tasks:
            # Not started (a lone execution outside a worker): one transaction of its own.
            return _write_one(self.store, unit)
        future: asyncio.Future[Fenced] = asyncio.get_running_loop().create_future()
        self._queue.append((unit, future))
        self._waiting.set()
        return future

    async def _lane(self) -> None:
        while True:
            await self._waiting.wait()
            take = MAX_UNITS
            if self._busy == 0 and len(self._queue) >= 2 * MIN_SPLIT:
                # Every lane is free: leave half for the next one, so that the
                # server works on one half while the worker takes the other's
                # answers, and the two halves' runs go on out of step.
                take = min(take, (len(self._queue) + 1) // 2)
            batch = self._queue[:take]
            del self._queue[:take]
            if not self._queue:
                self._waiting.clear()
            batch = [(unit, future) for unit, future in batch if not future.cancelled()]
            if batch:
                self._busy += 1
                try:
                    await self._commit(batch)
                finally:
                    self._busy -= 1

    async def _commit(self, batch: list[_Queued]) -> None:
        # Task rows are locked in task id order in every transaction, as the
        # heartbeat does: two transactions never wait for each other in a cycle.
        batch.sort(key=lambda item: item[0].fence.task_id)
        try:
            results = await _write(self.store, [unit for unit, _ in batch])
        except asyncio.CancelledError:
            # The worker is stopping: whether this transaction committed is
            # unknown, as after a lost connection.
            for _, future in batch:
                _resolve(future, exc=Disconnected("the worker stopped during a commit"))
            raise
        except (Exception, Disconnected) as exc:
            if len(batch) == 1 or lost_connection(exc):
                for _, future in batch:
                    _resolve(future, exc=exc)
                return
            log.info(
                "a shared commit of %d units failed (%s); committing each alone", len(batch), exc
            )
            for unit, future in batch:
                try:
                    _resolve(future, (await _write(self.store, [unit]))[0])
                except (Exception, Disconnected) as alone:
                    _resolve(future, exc=alone)
            return
        self.transactions += 1
        self.units += len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            _resolve(future, result)


def lost_connection(exc: BaseException) -> bool:
    """Whether a failed shared commit lost its connection (no unit can be tried alone now).

    A deadlock or serialization failure of the shared transaction, or a
    statement error, leaves the connection usable: each unit is then tried
    in a transaction of its own.
    """
    if not isinstance(exc, Disconnected):
        return False
    return exc.__cause__ is None or is_unavailable(exc.__cause__)


async def _write(store: AsyncStore, units: list[Unit]) -> list[Fenced]:
    """Write ``units`` in one transaction, one statement per kind; their answers, in order."""
    checkpoints = [unit for unit in units if isinstance(unit, Checkpoint)]
    completions = [unit for unit in units if isinstance(unit, Completion)]
    written, completed = await store.write_batch(checkpoints, completions)
    answers, by_kind = iter(written), iter(completed)
    return [next(answers) if isinstance(unit, Checkpoint) else next(by_kind) for unit in units]


async def _write_one(store: AsyncStore, unit: Unit) -> Fenced:
    """Write ``unit`` in a transaction of its own; its answer."""
    return (await _write(store, [unit]))[0]


def _resolve(
    future: asyncio.Future[Fenced],
    result: Fenced | None = None,
    exc: BaseException | None = None,
) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    elif result is not None:
        future.set_result(result)
