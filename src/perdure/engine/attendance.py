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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from perdure.engine.claiming import Claims
from perdure.engine.executions import Executions
from perdure.engine.maintenance import Heartbeat
from perdure.engine.observer import Observer, task_fields
from perdure.engine.options import WorkerOptions
from perdure.engine.wakeup import Wakeup
from perdure.engine.watchdog import LoopWatch, StepsInFlight
from perdure.store.listener import Listener
from perdure.store.statements import Statements
from perdure.store.statements.queues import WAKE_PREFIX

log = logging.getLogger("perdure.worker")


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
        self.heartbeat: Heartbeat | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

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
        )
        watch = LoopWatch(
            loop, options.blocked_loop_seconds, steps.steps.get, self.observer.loop_blocked
        )
        return Wakeup(
            url,
            self.statements.channel,
            name,
            chores=[heartbeat, watch],
            place=self.place,
            confirm=self.confirm,
        )

    def place(self, payload: str) -> int | None:
        """Where this worker stands in answering a notification (engine/wakeup.py):
        by its rank among the workers of the task's queue. Another worker's call
        (a slot freed in a queue limited across workers, steps more than it can
        run) is checked by all within CONFIRM_SECONDS."""
        if payload in self._queues:
            ranks = self.heartbeat.queue_ranks if self.heartbeat is not None else {}
            return ranks.get(payload, 0)
        if payload.startswith(WAKE_PREFIX) and payload != self._own_wake:
            return 1
        return None

    def confirm(self, listener: Listener) -> bool:
        """Whether work is left for this worker after a notification another answered
        first (on the wakeup thread: one query, instead of a claim through the loop)."""
        if self.free_slots() <= 0:
            return False
        woken = True
        if self.claims.unlimited and not self.claims.throttled:
            due = listener.execute(self.claims.due())
            woken = due is not None and time.monotonic() + due < self.wait_until
        self.wake_checks[woken] += 1
        return woken

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
