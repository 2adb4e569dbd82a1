"""The worker: claim tasks, execute them, keep their leases, stop gracefully.

One asyncio loop per worker process. The claim loop takes up to
``concurrency`` tasks at a time in batches; each claimed task runs as an
asyncio task. Idle, the loop sleeps until a NOTIFY arrives, a slot frees up,
the next known task becomes due, or the poll interval (the fallback) elapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from perdure.engine import graph, maintenance, outcome, retention, schedules
from perdure.engine.commit import Committer
from perdure.engine.control import Disconnected
from perdure.engine.environment import ExecutionEnv, WorkflowSpec
from perdure.engine.observer import (
    LoggingObserver,
    Observer,
    Observers,
    StepAttempt,
    task_fields,
)
from perdure.engine.options import WorkerOptions
from perdure.engine.serialization import DEFAULT_MAX_PAYLOAD_BYTES
from perdure.engine.services import Loop, Service, Services
from perdure.engine.wakeup import Wakeup
from perdure.engine.watchdog import LoopWatch
from perdure.errors import ConfigurationError
from perdure.store.rows import ClaimedTask
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.worker")


class _StepsInFlight(Observer):
    """The step each run of this worker is executing, for the loop watch's warning."""

    def __init__(self) -> None:
        self.steps: dict[str, str] = {}

    def step_started(self, step: StepAttempt) -> Any:
        self.steps[step.task.run_id] = step.name
        return None

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        self.steps.pop(step.task.run_id, None)


@dataclass
class _Held:
    task: ClaimedTask
    job: asyncio.Task[str]


class Worker:
    """A worker process's engine: give it workflow specs, then ``await run()``."""

    #: The event loop :meth:`run` serves on.
    _loop: asyncio.AbstractEventLoop

    def __init__(
        self,
        url: str,
        statements: Statements,
        specs: Mapping[tuple[str, int], WorkflowSpec[Any]],
        options: WorkerOptions | None = None,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        before_start: Callable[[AsyncStore], Any] | None = None,
        observers: Sequence[Observer] = (),
        direct_url: str | None = None,
    ) -> None:
        """Serve ``specs`` (keyed by name and version) from the database at ``url``.

        With ``direct_url``, ``url`` may go through a transaction-mode pooler:
        LISTEN and the maintenance lock use ``direct_url`` (see
        :mod:`perdure.store.connect`).

        ``observers`` are told of claims, executions, steps and how runs end,
        after the worker's own :class:`LoggingObserver` (see
        :mod:`perdure.engine.observer`).
        """
        if not specs:
            raise ConfigurationError("a worker needs at least one workflow to serve")
        self.url = url
        self.direct_url = direct_url
        self.statements = statements
        self.specs = dict(specs)
        self.options = options or WorkerOptions()
        self.id = (
            self.options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.queues = sorted(self.options.queues or {s.queue for s in self.specs.values()})
        self.max_payload_bytes = max_payload_bytes
        self.on_event = on_event
        self.before_start = before_start
        self._steps = _StepsInFlight()
        self.observer = Observers([LoggingObserver(), self._steps, *observers])
        #: The worker's connection pool while it runs.
        self.store: AsyncStore | None = None
        self.stop_requested = asyncio.Event()
        self.running: dict[int, _Held] = {}
        self.counts: dict[str, int] = {}
        self._slot_freed = asyncio.Event()
        #: The served queues with a global concurrency limit, as the last claim
        #: under their locks found them; None when unknown. While it is empty,
        #: claims take the plain one-statement path.
        self._limited: list[str] | None = None
        #: Those of them with a partition or rate limit: claimed by
        #: task_claim_throttled, left out of task_next_due.
        self._throttled: list[str] = []
        self._throttled_first = False
        #: Runs of this worker's queues waiting for a future time, and the next wake-up.
        self.waiting = 0
        self.next_wake: datetime | None = None

    def request_stop(self) -> None:
        """Stop claiming; finish in-flight work within ``shutdown_seconds``, release the rest."""
        self.stop_requested.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self.stop_requested.is_set()

    @property
    def heartbeat_seconds(self) -> float:
        """Seconds between two heartbeats."""
        return self.options.heartbeat_interval

    def _emit(self, event: str, fields: dict[str, Any]) -> None:
        self.counts[event] = self.counts.get(event, 0) + 1
        if self.on_event is not None:
            self.on_event(event, fields)

    async def run(self) -> None:
        """Serve until :meth:`request_stop` is called (or the task is cancelled)."""
        opts = self.options
        # Every connection of this worker is named perdure-worker-<id>[-kind],
        # so that pg_stat_activity tells whose it is.
        name = f"perdure-worker-{self.id}"[:50]
        store = AsyncStore(
            self.url,
            self.statements,
            min_size=1,
            max_size=opts.concurrency + 4,
            max_idle=10.0,
            name=name,
            unavailable=Disconnected,
            direct_url=self.direct_url,
        )
        await store.open(timeout=opts.connect_seconds)
        self._loop = asyncio.get_running_loop()
        threads = ThreadPoolExecutor(
            max_workers=opts.concurrency * 2 + 4, thread_name_prefix="perdure-step"
        )
        committer = Committer(store)
        env = ExecutionEnv(
            store,
            opts.lease_seconds,
            threads,
            self.max_payload_bytes,
            on_event=self._emit,
            specs=self.specs,
            observer=self.observer,
            committer=committer,
        )
        heartbeat = maintenance.Heartbeat(
            self.statements,
            self.id,
            opts.lease_seconds,
            opts.heartbeat_interval,
            opts.idle_heartbeat_interval,
            lambda: list(self.running),
            self._leases_lost,
            self._beat,
        )
        watch = LoopWatch(
            asyncio.get_running_loop(),
            opts.blocked_loop_seconds,
            self._steps.steps.get,
            self.observer.loop_blocked,
        )
        wakeup = Wakeup(
            store.endpoints.session_url,
            self.statements.channel,
            f"{name}-listen",
            chores=[heartbeat, watch],
        )
        services = Services([wakeup, *self._loops(store, heartbeat.duty), committer])
        try:
            await self._register(store)
            self.store = store
            self.observer.worker_started(self)
            services.start()
            log.info(
                "worker %s serving queues %s with concurrency %d",
                self.id,
                self.queues,
                opts.concurrency,
            )
            self._emit("worker_started", {"worker_id": self.id})
            await self._claim_loop(store, env, wakeup)
        finally:
            await self._shutdown(store)
            await services.stop()
            await self._close(store, env, committer)

    def _loops(self, store: AsyncStore, duty: threading.Event) -> list[Service]:
        """The periodic loops beside the claim loop (fewer in inline mode).

        The reaper and the schedule ticker run only while this worker holds
        the fleet's duties (see :mod:`perdure.engine.maintenance`).
        """
        opts = self.options
        status = Loop(
            "status",
            lambda: maintenance.status_loop(store, self.queues, 60.0, self._report_waiting),
        )
        reaper = Loop(
            "reaper",
            lambda: maintenance.on_duty(
                duty,
                lambda: maintenance.reaper_loop(
                    store,
                    opts.reap_interval,
                    opts.max_lapses,
                    opts.lease_seconds * 2,
                    self.observer.dead_lettered,
                ),
            ),
        )
        loops: list[Service] = [status, reaper]
        if not opts.exit_when_idle:
            loops.append(
                Loop(
                    "ticker",
                    lambda: maintenance.on_duty(
                        duty, lambda: schedules.tick_loop(store, opts.poll_seconds)
                    ),
                )
            )
            loops.append(Loop("retention", lambda: self._maintenance(store)))
        return loops

    async def _register(self, store: AsyncStore) -> None:
        """Run the ``before_start`` hook and register this worker in the workers table."""
        if self.before_start is not None:
            await self.before_start(store)
        await store.execute(
            self.statements.workers.register(
                worker_id=self.id,
                host=socket.gethostname(),
                pid=os.getpid(),
                queues=self.queues,
                workflows=sorted({f"{n}@{v}" for n, v in self.specs}),
                concurrency=self.options.concurrency,
            )
        )

    async def _close(self, store: AsyncStore, env: ExecutionEnv, committer: Committer) -> None:
        """Deregister, close the pools and threads, keep the counts; tell the observers."""
        with contextlib.suppress(Exception, Disconnected):
            await store.execute(self.statements.workers.stop(self.id))
        await store.close()
        self.counts["statements"] = store.statement_count
        self.counts["round_trips"] = store.round_trips
        self.counts["shared_commits"] = committer.transactions
        self.counts["committed_units"] = committer.units
        self.store = None
        if env.sync_pool is not None:
            env.sync_pool.close()
        env.threads.shutdown(wait=False, cancel_futures=True)
        self.observer.worker_stopped(self)
        self._emit("worker_stopped", {"worker_id": self.id})

    async def _claim_loop(self, store: AsyncStore, env: ExecutionEnv, wakeup: Wakeup) -> None:
        opts = self.options
        names = [n for n, _ in self.specs]
        versions = [v for _, v in self.specs]
        backoff = 0.0
        while not self.stop_requested.is_set():
            free = opts.concurrency - len(self.running)
            timeout: float | None = None
            try:
                if opts.exit_when_idle:
                    # Inline mode has no reaper schedule: revive lapsed
                    # leases (a test's simulated crash) before each claim.
                    _, dead = await store.execute(
                        self.statements.tasks.rescue(limit=500, max_lapses=opts.max_lapses)
                    )
                    if dead:
                        self.observer.dead_lettered(dead)
                if free > 0:
                    want = min(free, opts.claim_batch)
                    wakeup.event.clear()
                    self._slot_freed.clear()
                    claimed = await self._claim(store, want, names, versions)
                    for task in claimed:
                        self._start(task, env)
                    if len(claimed) == want:
                        continue
                    timeout = self._poll_seconds(wakeup)
                    if claimed:
                        # Let the executions just started reach their first
                        # await before this loop's next query: a woken run's
                        # first step starts without waiting for it.
                        await asyncio.sleep(0)
                    self._emit("worker_idle", {"free": free - len(claimed)})
                    due = await self._next_due(store, names, versions)
                    if due is not None:
                        timeout = min(timeout, max(due, 0.0))
                        if due <= 0:
                            # Claimable work was left behind: another worker
                            # was claiming it, or its queue got a global limit
                            # since this worker last looked. Look again, under
                            # the queue locks.
                            self._limited = None
                    # A run that finished since the claim may have left
                    # work its limit held back: look again before leaving.
                    idle = not self.running and not self._slot_freed.is_set()
                    if opts.exit_when_idle and idle and (due is None or due > 0):
                        return
                backoff = 0.0
            except (Exception, Disconnected) as exc:
                # The database went away or refused us: back off (bounded, so a
                # long outage costs a reconnect attempt every few seconds, not
                # a busy loop) and try again without restarting the worker.
                backoff = min(max(backoff * 2, 0.25), 5.0)
                log.warning("claim failed (%s); retrying in %.2f s", exc, backoff)
                timeout = backoff
                wakeup.event.clear()
            await self._wait(wakeup.event, timeout)

    def _poll_seconds(self, wakeup: Wakeup) -> float:
        """The fallback poll: rare while notifications wake the worker."""
        if wakeup.connected.is_set() and self._limited == []:
            return max(self.options.idle_poll_seconds, self.options.poll_seconds)
        return self.options.poll_seconds

    async def _claim(
        self, store: AsyncStore, want: int, names: list[str], versions: list[int]
    ) -> list[ClaimedTask]:
        """Claim up to ``want`` tasks, within the limits of their queues, with their checkpoints.

        A queue with a global limit is claimed from only under its row lock
        (``queue_lock`` then ``task_claim``, in one transaction), so that
        workers claiming at once never exceed the limit together. When none of
        the served queues has one, the claim is the plain single statement,
        pipelined with the read of the claimed tasks' checkpoints: one round
        trip, one transaction.
        """

        def claim(
            locked: list[str], queues: list[str], limit: int, throttled: bool = False
        ) -> Statement[list[ClaimedTask]]:
            return self.statements.tasks.claim(
                worker_id=self.id,
                queues=queues,
                names=names,
                versions=versions,
                limit=limit,
                lease_seconds=self.options.lease_seconds,
                locked=locked,
                throttled=throttled,
            )

        began = time.perf_counter()
        read = self.statements.steps.list_claimed_now(self.id)
        if self._limited == []:
            found, steps = (await store.execute_batch([[claim([], self.queues, want), read]]))[0]
            self.observer.claimed(found, time.perf_counter() - began)
            return _with_steps(found, steps)
        async with store.transaction() as conn:
            locks = await store.execute(self.statements.queues.lock(self.queues), conn)
            locked = [name for name, _ in locks]
            throttled = [name for name, is_throttled in locks if is_throttled]
            plain = [queue for queue in self.queues if queue not in throttled]
            # Throttled queues (partition or rate limits) have a claim of their
            # own; the others keep task_claim. The two take turns going first,
            # so that neither kind crowds the other out of a worker's batch.
            claims: list[Callable[[int], Statement[list[ClaimedTask]]]] = []
            if plain:
                claims.append(lambda limit: claim(locked, plain, limit))
            if throttled:
                claims.insert(
                    0 if self._throttled_first else len(claims),
                    lambda limit: claim(locked, throttled, limit, throttled=True),
                )
            self._throttled_first = not self._throttled_first
            claimed: list[ClaimedTask] = []
            for make in claims:
                if len(claimed) < want:
                    more = await store.execute(make(want - len(claimed)), conn)
                    claimed.extend(more)
            # Read after the claims, in their transaction: a later statement's
            # snapshot sees every checkpoint committed before the claim.
            steps = await store.execute(read, conn) if claimed else {}
        self._limited = locked
        self._throttled = throttled
        self.observer.claimed(claimed, time.perf_counter() - began)
        return _with_steps(claimed, steps)

    async def _next_due(
        self, store: AsyncStore, names: list[str], versions: list[int]
    ) -> float | None:
        """Seconds until the next task this worker may claim is due (None: none known).

        Throttled queues answer separately, with only future moments: their
        due tasks may be held back by a limit, and must not make the worker spin.
        """
        plain = [queue for queue in self.queues if queue not in self._throttled]
        found: list[float] = []
        if plain:
            due = await store.execute(
                self.statements.tasks.next_due(self.id, plain, names, versions)
            )
            if due is not None:
                found.append(due)
        if self._throttled:
            due = await store.execute(
                self.statements.tasks.next_due_throttled(self._throttled, names, versions)
            )
            if due is not None:
                found.append(due)
        return min(found) if found else None

    async def _wait(self, wake: asyncio.Event, timeout: float | None) -> None:
        self._slot_freed.clear()
        waiters = [
            asyncio.create_task(e.wait()) for e in (wake, self._slot_freed, self.stop_requested)
        ]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _start(self, task: ClaimedTask, env: ExecutionEnv) -> None:
        spec = self.specs[(task.workflow, task.version)]
        job = asyncio.create_task(self._execute(task, spec, env), name=f"perdure-run-{task.run_id}")
        self.running[task.fence.task_id] = _Held(task, job)

    async def _execute(self, task: ClaimedTask, spec: WorkflowSpec[Any], env: ExecutionEnv) -> str:
        result = "error"
        began = time.perf_counter()
        token = self.observer.execution_started(task)
        try:
            if getattr(spec, "kind", "function") == "graph":
                result = await graph.execute(task, spec, env)
            else:
                result = await outcome.execute(task, spec, env)
        except asyncio.CancelledError:
            result = "cancelled"
            raise
        except Disconnected as exc:
            result = "disconnected"
            log.warning(
                "run %s: lost the database mid-execution (%s)",
                task.run_id,
                exc,
                extra=task_fields(task),
            )
            await self._hand_back(env.store, task)
        except Exception:
            # A database error mid-execution: the task stays claimed and its
            # lease lapses, so another worker (or this one) replays it.
            log.exception(
                "executing run %s failed; its lease will lapse",
                task.run_id,
                extra=task_fields(task),
            )
        finally:
            self.observer.execution_finished(task, token, result, time.perf_counter() - began)
            self.running.pop(task.fence.task_id, None)
            env.lost_tasks.discard(task.fence.task_id)
            self._slot_freed.set()
            self._emit("task_done", {"run_id": task.run_id, "outcome": result})
        return result

    async def _hand_back(self, store: AsyncStore, task: ClaimedTask) -> None:
        """Give back a task whose execution lost the database, as soon as it answers.

        The checkpoints hold everything done so far, so the run can be
        replayed at once by any worker. Until the task is handed back it stays
        in ``running``: its heartbeat holds the lease, and it takes no lapse.
        If the database stays away longer than twice the lease, the lease is
        left to lapse and the reaper makes the task claimable instead.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.options.lease_seconds
        delay = 0.25
        while True:
            try:
                await store.execute(
                    self.statements.tasks.release(
                        task.fence,
                        delay_seconds=0,
                        failed=False,
                        event="run_released",
                        detail_json='{"reason": "database unreachable"}',
                    )
                )
                log.info(
                    "run %s handed back after the database came back",
                    task.run_id,
                    extra=task_fields(task),
                )
                return
            except (Exception, Disconnected) as exc:
                if loop.time() + delay > deadline or self.stop_requested.is_set():
                    log.warning(
                        "run %s not handed back (%s); its lease will lapse",
                        task.run_id,
                        exc,
                        extra=task_fields(task),
                    )
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _maintenance(self, store: AsyncStore) -> None:
        """History partitions ahead and, with ``prune_after``, retention, every interval."""
        opts = self.options
        await retention.maintenance_loop(
            store,
            interval=opts.maintenance_seconds,
            prune_after=opts.prune_after,
            archive=opts.prune_archive,
            batch_size=opts.prune_batch,
            report=lambda result: self._emit("maintenance_pass", {"result": result}),
        )

    def _report_waiting(self, waiting: int, next_wake: datetime | None) -> None:
        """Log the number of waiting runs and the next wake-up when they change."""
        if (waiting, next_wake) == (self.waiting, self.next_wake):
            return
        self.waiting, self.next_wake = waiting, next_wake
        when = next_wake.astimezone().strftime("%Y-%m-%d %H:%M:%S") if next_wake else "-"
        log.info("%d run(s) waiting in %s; next wake-up %s", waiting, ",".join(self.queues), when)

    def _beat(self) -> None:
        """Tell the observers of a heartbeat (called on the wakeup thread)."""
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self.observer.heartbeat)

    def _leases_lost(self, task_ids: set[int]) -> None:
        """Log the tasks taken away (called on the wakeup thread)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._report_lost, task_ids)

    def _report_lost(self, task_ids: set[int]) -> None:
        for task_id in task_ids:
            held = self.running.get(task_id)
            if held is None:
                continue
            log.warning(
                "worker %s lost the lease on task %d (run %s)",
                self.id,
                task_id,
                held.task.run_id,
                extra=task_fields(held.task),
            )
            self._emit("lease_lost", {"run_id": held.task.run_id, "task_id": task_id})

    async def _shutdown(self, store: AsyncStore) -> None:
        if not self.running:
            return
        jobs = [held.job for held in self.running.values()]
        log.info(
            "worker %s stopping: waiting up to %.0f s for %d run(s)",
            self.id,
            self.options.shutdown_seconds,
            len(jobs),
        )
        _, pending = await asyncio.wait(jobs, timeout=self.options.shutdown_seconds)
        leftovers = [held for held in list(self.running.values()) if held.job in pending]
        for held in leftovers:
            held.job.cancel()
        await asyncio.gather(*(h.job for h in leftovers), return_exceptions=True)
        for held in leftovers:
            # Handing the task back now lets another worker resume the run at
            # once instead of waiting for the lease to lapse.
            with contextlib.suppress(Exception, Disconnected):
                await store.execute(
                    self.statements.tasks.release(
                        held.task.fence, delay_seconds=0, failed=False, event="run_released"
                    )
                )


def _with_steps(
    claimed: list[ClaimedTask], steps: Mapping[int, Sequence[Any]]
) -> list[ClaimedTask]:
    """The claimed tasks, each with the checkpoints read for it in the claim's round trip."""
    return [replace(t, steps=tuple(steps.get(t.fence.task_id, ()))) for t in claimed]
