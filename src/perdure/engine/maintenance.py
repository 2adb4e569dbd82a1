"""Housekeeping: heartbeats on the wakeup thread, and the fleet's duties on one worker.

Every worker beats (its row, and the leases of the tasks it executes) from
its wakeup thread, so that a blocked event loop does not cost its leases. The
fleet's duties (the reaper for expired leases, the schedule ticker) are taken
by one worker at a time, the duty holder: the live worker with the smallest
id, as each worker's row heartbeat tells it (``worker_beat``). If two
workers hold them for a moment, ``FOR UPDATE SKIP LOCKED`` in ``task_rescue``
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

from perdure.engine.control import Disconnected
from perdure.store.listener import Listener
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
    called on the wakeup thread.
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
        # The first beats come quickly: the rank settles while a fleet starts.
        wait = self.interval if held else self.idle_interval
        self._next = now + (wait if self._beats >= 3 else min(wait, 1.0))
        self._beats += 1
        beat = self.statements.workers.beat(self.worker_id, self.lease_seconds)
        try:
            if held:
                taken, (rank, by_queue) = listener.execute_together(
                    [
                        self.statements.tasks.heartbeat(
                            self.worker_id, sorted(held), self.lease_seconds
                        ),
                        beat,
                    ]
                )
            else:
                taken, (rank, by_queue) = set(), listener.execute(beat)
        except Exception as exc:
            log.warning("heartbeat failed: %s", exc)
            self._next = now + min(self.interval, 1.0)
            raise
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
    on_dead: Callable[[int], None] = lambda count: None,
) -> None:
    """Every ``interval`` s: revive expired leases, enforce deadlines, mark silent workers.

    One transaction a pass. ``on_dead`` is told how many tasks each pass dead-lettered.
    """
    statements = store.statements
    while True:
        await asyncio.sleep(interval)
        try:
            ((rescued, expired, _),) = await store.execute_batch(
                [
                    [
                        statements.tasks.rescue(limit=500),
                        statements.runs.expire(),
                        statements.workers.mark_lost(stale_seconds),
                    ]
                ]
            )
            revived, dead = rescued
            if revived or dead:
                log.info("reaper revived %d task(s), dead-lettered %d", revived, dead)
            if dead:
                on_dead(dead)
            if expired:
                log.info("cancelled %d run(s) past their deadline", expired)
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
