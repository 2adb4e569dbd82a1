"""Housekeeping: heartbeats on the wakeup thread, and the fleet's duties on one worker.

Every worker beats (its row, and the leases of the tasks it executes) from
its wakeup thread, so that a blocked event loop does not cost its leases. The
fleet's duties (the reaper for lapsed leases, the schedule ticker) are taken
by one worker at a time, the duty holder: the live worker with the smallest
id, as each worker's row heartbeat tells it (``worker_beat``). If two
workers hold them for a moment, ``FOR UPDATE SKIP LOCKED`` in ``task_reap``
and the schedules' row locks make them share the work instead of racing.
The loops here are run as jobs (engine/housekeeping.py) by
``services.Runner``, which starts and stops the duties' jobs as the duty
moves.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from perdure.engine.control import Disconnected
from perdure.store.listener import Listener
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.maintenance")


class Heartbeat:
    """The wakeup thread's heartbeat chore: the worker row, and the leases it holds.

    With tasks held it beats every ``interval`` s, in one transaction: the
    leases of exactly the tasks the worker still executes (``held()``, each
    id with the attempt its execution holds), and
    its row. Idle it beats only its row, every ``idle_interval`` s. Tasks
    taken away are passed to ``on_lost`` (by id, with that attempt); each
    beat to ``on_beat``. Both are
    called on the wakeup thread. The row says what ``listening()`` says:
    whether the worker LISTENs on its own channel until its next beat. A
    worker that does not listens for nothing, so ``look()`` gives a statement
    run in the beat's transaction (when does the next task it may claim come
    due), and its answer goes to ``on_look``: the worker's only way to learn
    of work left waiting before its fallback poll.
    """

    def __init__(
        self,
        statements: Statements,
        worker_id: str,
        lease_seconds: float,
        interval: float,
        idle_interval: float,
        held: Callable[[], dict[int, int]],
        on_lost: Callable[[dict[int, int]], None],
        on_beat: Callable[[], None] = lambda: None,
        listening: Callable[[], bool] = lambda: True,
        look: Callable[[], Statement[float | None] | None] = lambda: None,
        on_look: Callable[[float | None], None] = lambda due: None,
    ) -> None:
        """Beat for ``worker_id``; see the class."""
        self.statements = statements
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.interval = interval
        self.idle_interval = idle_interval
        self.held = held
        self.on_lost = on_lost
        self.on_beat = on_beat
        self.listening = listening
        self.look = look
        self.on_look = on_look
        #: What the last beat wrote in the row: whether the worker listens.
        self.said_listening = True
        #: Whether this worker holds the fleet's duties, as of its last beat.
        self.duty = threading.Event()
        #: Live workers with a smaller id, as of the last beat (0: the duty holder).
        self.rank = 0
        #: The same, by served queue, among the workers serving it (0: answers first).
        self.queue_ranks: dict[str, int] = {}
        self._next = 0.0
        self._was_busy = False
        self._beats = 0

    def tend(self, listener: Listener | None) -> None:
        """Beat if one is due (now, when tasks were just claimed after idling)."""
        now = time.monotonic()
        held = _snapshot(self.held)
        if listener is None:
            return
        if held and not self._was_busy:
            # Tasks were just claimed: their first beat comes within an
            # interval, however long the idle beat's wait was.
            self._next = min(self._next, now + self.interval)
        self._was_busy = bool(held)
        if now < self._next:
            return
        # The first beats come quickly: each worker's rank is known soon after a fleet starts.
        wait = self.interval if held else self.idle_interval
        self._next = now + (wait if self._beats >= 3 else min(wait, 1.0))
        self._beats += 1
        listening = self.listening()
        stmts: list[Statement[Any]] = [
            self.statements.workers.beat(self.worker_id, self.lease_seconds, listening)
        ]
        if held:
            stmts.insert(
                0, self.statements.tasks.heartbeat(self.worker_id, sorted(held), self.lease_seconds)
            )
        look = None if held else self.look()
        if look is not None:
            stmts.append(look)
        try:
            if len(stmts) > 1:
                found = listener.execute_together(stmts)
            else:
                found = [listener.execute(stmts[0])]
        except Exception as exc:
            log.warning("heartbeat failed: %s", exc)
            self._next = now + min(self.interval, 1.0)
            raise
        taken = found.pop(0) if held else set()
        rank, by_queue = found.pop(0)
        self.said_listening = listening
        self.rank, self.queue_ranks = rank, by_queue
        duty = rank == 0
        if duty != self.duty.is_set():
            verb = "takes" if duty else "leaves"
            log.info("worker %s %s the fleet's duties", self.worker_id, verb)
        if duty:
            self.duty.set()
        else:
            self.duty.clear()
        self.on_beat()
        if look is not None:
            self.on_look(found.pop(0))
        if taken:
            # With the attempt each was executed under when the beat began: a
            # task handed back and claimed again since is a new execution.
            self.on_lost({task_id: held[task_id] for task_id in taken})


def _snapshot(held: Callable[[], dict[int, int]]) -> dict[int, int]:
    """``held()``, taken again if the loop changed it while it was copied."""
    for _ in range(10):
        try:
            return held()
        except RuntimeError:
            continue
    return held()


async def reaper_loop(
    store: AsyncStore,
    interval: float,
    stale_seconds: float,
    reaped_for_good: Callable[[int], None] = lambda count: None,
) -> None:
    """Every ``interval`` s: reap lapsed leases, enforce deadlines, mark silent workers.

    One transaction a pass. ``reaped_for_good`` is told how many tasks each pass reaped for good.
    """
    statements = store.statements
    while True:
        await asyncio.sleep(interval)
        try:
            ((reaped, past_deadline, _),) = await store.execute_batch(
                [
                    [
                        statements.tasks.reap(limit=500),
                        statements.runs.expire(),
                        statements.workers.mark_lost(stale_seconds),
                    ]
                ]
            )
            requeued, for_good = reaped
            if requeued or for_good:
                log.info(
                    "reaper reaped %d task(s) whose lease lapsed: %d claimable again, "
                    "%d for good (max_lapses)",
                    requeued + for_good,
                    requeued,
                    for_good,
                )
            if for_good:
                reaped_for_good(for_good)
            if past_deadline:
                log.info("cancelled %d run(s) past their deadline", past_deadline)
        except (Exception, Disconnected) as exc:
            log.warning("reaper failed: %s", exc)


async def status_loop(
    store: AsyncStore,
    queues: list[str],
    interval: float,
    report: Callable[[int, datetime | None], None],
) -> None:
    """Every ``interval`` s, report how many runs wait for a time and the next wake-up."""
    while True:
        try:
            waiting, next_wake = await store.execute(store.statements.tasks.waiting_summary(queues))
            report(waiting, next_wake)
        except (Exception, Disconnected) as exc:
            log.warning("status query failed: %s", exc)
        await asyncio.sleep(interval)
