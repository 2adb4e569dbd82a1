"""A worker's wakeup thread, put together: its chores, and its answers to notifications.

The thread (engine/wakeup.py) tends two chores: the heartbeat
(engine/maintenance.py: the worker's row and its leases, which also tells
whether it holds the fleet's duties) and the loop watch
(engine/watchdog.py). ``Attendance`` gives it the worker's answers: where
the worker stands for a notification (by its rank among the workers of the
task's queue), whether work is left for it after another worker answered
first, and which executions stop because the heartbeat found their tasks
taken. Its callbacks run on the wakeup thread and reach the event loop only
through ``call_soon_threadsafe``.

Only the first LISTENERS workers of a queue listen on the shared channel
(``shared``); a listener too busy to take work left after a notification
passes the call on to the next live worker of its queues (by id) that
listens on a channel of its own, which checks at once and passes it on in
turn when it is full too. Those are the first WINDOW workers of a queue and
any worker with work in hand (``own``); an idle worker beyond them holds no
LISTEN, so that notifications cost it and the server nothing, and looks for
work left waiting at each heartbeat instead (``look``). A schedule changed
elsewhere nudges the ticker (engine/schedules.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Generator
from typing import Any

from perdure.engine.claiming import Claims
from perdure.engine.executions import Executions
from perdure.engine.maintenance import Heartbeat
from perdure.engine.observer import Observer, task_fields
from perdure.engine.options import WorkerOptions
from perdure.engine.schedules import Nudge
from perdure.engine.wakeup import (
    CONFIRM_SECONDS,
    FORWARDED,
    IDLE_TICK_SECONDS,
    LATE_CONFIRM_SECONDS,
    LISTENERS,
    STAGGER_SECONDS,
    STAGGER_WAVE,
    WINDOW,
    Wakeup,
)
from perdure.engine.watchdog import LoopWatch, StepsInFlight
from perdure.store.listener import Listener
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.statements.queues import WAKE_PREFIX
from perdure.store.statements.schedules import SCHEDULES_PAYLOAD
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.worker")

#: How long past its due time work is left waiting before a worker that hears
#: no notification, finding it at its heartbeat, wakes for it.
LEFT_WAITING_SECONDS = 1.0


class Attendance:
    """The wakeup thread's side of one worker; ``wakeup(...)`` makes the thread."""

    def __init__(
        self,
        worker_id: str,
        queues: list[str],
        statements: Statements,
        claims: Claims,
        running: Executions,
        observer: Observer,
        free_slots: Callable[[], int],
    ) -> None:
        """Answer for the worker ``worker_id`` serving ``queues``."""
        self.worker_id = worker_id
        self.statements = statements
        self.claims = claims
        self.running = running
        self.observer = observer
        self.free_slots = free_slots
        self._queues = frozenset(queues)
        self._own_wake = statements.queues.wake_payload(worker_id)
        #: When the claim loop's current wait ends by itself (monotonic; set by
        #: the loop, read here to tell whether work due then needs a wake).
        self.wait_until = math.inf
        #: Notifications another worker answered first, checked by this one:
        #: [left alone, woken for] (engine/wakeup.py).
        self.wake_checks = [0, 0]
        #: Calls this worker passed on to the next worker, being full.
        self.forwarded = 0
        #: Calls this worker heard while full, for work due now it could not take.
        self.heard_full = 0
        self.heartbeat: Heartbeat | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: Wakeup | None = None
        #: What tells the ticker of a schedule changed elsewhere.
        self.nudge = Nudge(asyncio.Event(), self.listening)

    def wakeup(
        self,
        url: str,
        name: str,
        options: WorkerOptions,
        steps: StepsInFlight,
        lost: set[int],
    ) -> Wakeup:
        """The wakeup thread (LISTEN on ``url`` as ``name``), with the heartbeat and the
        loop watch; executions found lost are added to ``lost`` (ExecutionEnv.lost_tasks).
        Call it on the worker's event loop."""
        self._loop = loop = asyncio.get_running_loop()
        heartbeat = self.heartbeat = Heartbeat(
            self.statements,
            self.worker_id,
            options.lease_seconds,
            options.heartbeat_interval,
            options.idle_heartbeat_interval,
            self.running.attempts,
            lambda taken: self._call(self._report_lost, taken, lost),
            self._beat,
            listening=self._reachable,
            look=self._look,
            on_look=self._looked,
        )
        watch = LoopWatch(
            loop,
            options.blocked_loop_seconds,
            steps.steps.get,
            self.observer.loop_blocked,
            busy=self.busy,
        )
        self._wakeup = Wakeup(
            url,
            self.statements.channel,
            name,
            chores=[heartbeat, watch],
            place=self.place,
            confirm=self.confirm,
            own_channel=self.statements.queues.worker_channel(self.worker_id),
            shared=self.shared,
            own=self.own,
            busy=self.busy,
            idle_tick=min(IDLE_TICK_SECONDS, options.heartbeat_interval / 4),
        )
        return self._wakeup

    def listening(self) -> bool:
        """Whether notifications of the shared channel reach this worker now."""
        wakeup = self._wakeup
        return wakeup is not None and wakeup.connected.is_set() and wakeup.listening_shared

    def rank(self) -> int:
        """This worker's first place among the workers of its queues (0 until told)."""
        ranks = self.heartbeat.queue_ranks if self.heartbeat is not None else {}
        return min(ranks.values(), default=0)

    def shared(self) -> bool:
        """Whether this worker listens on the shared channel: it is among the first
        LISTENERS workers of one of its queues (or has not been told its place)."""
        return self.rank() < LISTENERS

    def busy(self) -> bool:
        """Whether this worker executes runs now (read from the wakeup thread)."""
        return len(self.running) > 0

    def _reachable(self) -> bool:
        """Whether this worker should hear calls passed on to it: it is among the
        first WINDOW workers of one of its queues, or has work in hand."""
        return self.rank() < WINDOW or self.busy()

    def own(self) -> bool:
        """Whether this worker listens on its own channel now: while it should
        (``_reachable``), and until a heartbeat has told the others it no longer
        does (a call passed on meanwhile still reaches it)."""
        said = self.heartbeat is None or self.heartbeat.said_listening
        return self._reachable() or said

    def _look(self) -> Statement[float | None] | None:
        """For a worker that hears no notification: when its next task comes due,
        asked in its heartbeat's transaction (None for one that listens)."""
        wakeup = self._wakeup
        if wakeup is None or wakeup.listening_shared or wakeup.listening_own:
            return None
        return self.claims.due()

    def _looked(self, due: float | None) -> None:
        """Wake the claim loop of a worker that hears nothing when work has been left
        waiting LEFT_WAITING_SECONDS past its due time (on the wakeup thread): the
        workers that listen take what is due on time, and a look must not race them."""
        if due is not None and due <= -LEFT_WAITING_SECONDS and self._wakeup:
            self._wakeup.wake()  # its claim, then its wait until the next task due

    def lag(self) -> float:
        """How long after a task's due time this worker's timer for it ends: at once
        for the first worker of its queues, when it would check a notification for
        the others (the first claims it, the others find it taken with one query)."""
        rank = self.rank()
        if rank == 0:
            return 0.0
        if rank == 1:
            return CONFIRM_SECONDS
        return LATE_CONFIRM_SECONDS + (rank - 2) % STAGGER_WAVE * STAGGER_SECONDS

    def place(self, payload: str) -> int | None:
        """Where this worker stands in answering a notification (engine/wakeup.py):
        by its rank among the workers of the task's queue (the first, when full,
        checks at once to pass the call on). Another worker's call
        (a slot freed in a queue limited across workers, steps more than it can
        run) is checked by all within CONFIRM_SECONDS."""
        if payload in self._queues:
            ranks = self.heartbeat.queue_ranks if self.heartbeat is not None else {}
            rank = ranks.get(payload, 0)
            if rank == 0 and self.free_slots() <= 0:
                # Full: not woken for nothing; it checks at once, and passes
                # the call on when the work is still there.
                return FORWARDED
            return rank
        if payload.startswith(WAKE_PREFIX) and payload != self._own_wake:
            return 1
        if payload == SCHEDULES_PAYLOAD:
            self._call(self.nudge.event.set)
        return None

    def confirm(self, listener: Listener) -> bool | float:
        """Whether work is left for this worker after a notification another answered
        first (on the wakeup thread: one query, instead of a claim through the loop);
        or, for work due later, in how many seconds to check again (engine/wakeup.py):
        the first worker of the queue wakes for it on time, the others only check,
        a moment after, that it took it. Full, it passes the call on to the next
        worker of its queues when work is due now."""
        if self.free_slots() <= 0:
            self._pass_on(listener)
            return False
        woken = True
        if self.claims.unlimited and not self.claims.throttled:
            due = listener.execute(self.claims.due())
            woken = due is not None and time.monotonic() + due < self.wait_until
            if woken and due is not None and due > 0 and self.rank() > 0:
                self.wake_checks[0] += 1
                return due + self.lag()
        self.wake_checks[woken] += 1
        return woken

    def _pass_on(self, listener: Listener) -> None:
        """Tell the next live worker of each served queue that listens (on its own
        channel) that work is due now which this full worker cannot take."""
        steps = self._passing_on()
        try:
            stmt = next(steps)
            while True:
                stmt = steps.send(listener.execute(stmt))
        except StopIteration:
            pass

    async def pass_on_async(self, store: AsyncStore) -> None:
        """``_pass_on`` from the event loop, through the worker's store."""
        steps = self._passing_on()
        try:
            stmt = next(steps)
            while True:
                stmt = steps.send(await store.execute(stmt))
        except StopIteration:
            pass

    def _passing_on(self) -> Generator[Statement[Any], Any, None]:
        """The statements of a pass-on, each sent its result: is work due now, which
        worker is next, and the call to it."""
        if self.heartbeat is None:
            return
        due = yield self.claims.due()
        if due is None or due > 0:
            return
        self.heard_full += 1
        fresh = self.heartbeat.lease_seconds
        queues = sorted(self._queues)
        successor = yield self.statements.workers.next_worker(self.worker_id, queues, fresh)
        if successor is None:
            return  # the last of its queues' listening workers: their heartbeats look
        yield self.statements.queues.forward(successor, self.worker_id)
        self.forwarded += 1

    def _call(self, callback: Callable[..., object], *args: object) -> None:
        """Run ``callback(*args)`` on the worker's loop (from the wakeup thread)."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(callback, *args)

    def _beat(self) -> None:
        """Tell the observers of a heartbeat (called on the wakeup thread)."""
        assert self.heartbeat is not None
        rank, queue_ranks = self.heartbeat.rank, dict(self.heartbeat.queue_ranks)
        self._call(self.observer.heartbeat)
        self._call(self.observer.ranked, rank, queue_ranks)

    def _report_lost(self, taken: dict[int, int], lost: set[int]) -> None:
        """The tasks taken away, by id with the attempt they were executed under (on
        the loop): those executions stop at their next ``ctx`` call."""
        for task_id, attempt in taken.items():
            held = self.running.get(task_id)
            if held is None or held.task.fence.attempt != attempt:
                continue  # ended, or claimed again since: a new execution
            lost.add(task_id)
            log.warning(
                "worker %s lost the lease on task %d (run %s)",
                self.worker_id,
                task_id,
                held.task.run_id,
                extra=task_fields(held.task),
            )
            self.observer.lease_taken(held.task)
