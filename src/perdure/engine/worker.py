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
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from perdure.engine import capacity, dispatch, modes, parallel
from perdure.engine.attendance import Attendance
from perdure.engine.claiming import Claims
from perdure.engine.commit import Committer
from perdure.engine.control import Disconnected, Outcome
from perdure.engine.environment import ExecutionEnv, WorkflowSpec
from perdure.engine.executions import Executions
from perdure.engine.housekeeping import Status
from perdure.engine.observer import (
    LoggingObserver,
    Observer,
    Observers,
)
from perdure.engine.options import NOTIFY_HORIZON_SECONDS, WorkerOptions
from perdure.engine.serialization import DEFAULT_MAX_PAYLOAD_BYTES
from perdure.engine.services import Runner, Services
from perdure.engine.threads import StepThreads
from perdure.engine.wakeup import Wakeup
from perdure.engine.watchdog import StepsInFlight
from perdure.errors import ConfigurationError
from perdure.store import outage_log
from perdure.store.rows import ClaimedTask
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.worker")


class Worker:
    """A worker process's engine: give it workflow specs, then ``await run()``."""

    #: The event loop ``run`` serves on.
    _loop: asyncio.AbstractEventLoop

    def __init__(
        self,
        url: str,
        statements: Statements,
        specs: Mapping[tuple[str, int], WorkflowSpec[Any]],
        options: WorkerOptions | None = None,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        before_start: Callable[[AsyncStore], Any] | None = None,
        observers: Sequence[Observer] = (),
        direct_url: str | None = None,
    ) -> None:
        """Serve ``specs`` (keyed by name and version) from the database at ``url``.

        With ``direct_url``, ``url`` may go through a transaction-mode pooler:
        LISTEN and the maintenance lock use ``direct_url`` (see
        ``perdure.store.connect``).

        ``observers`` are told of claims, executions, steps and how runs end,
        after the worker's own ``LoggingObserver`` (see
        ``perdure.engine.observer``).
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
        self.before_start = before_start
        self._steps = StepsInFlight()
        #: What the worker did: each observer hook called, by name (executions
        #: ended: ``execution_finished``; runs ended: ``run_<status>``), and
        #: its statements and commits once it stopped.
        self.counts: dict[str, int] = {}
        logging_observer = LoggingObserver(redact_errors=statements.payloads.redacts_errors)
        self.observer = Observers([logging_observer, self._steps, *observers], self.counts)
        self.claims = Claims(
            statements,
            self.id,
            self.queues,
            list(self.specs),
            self.options.lease_seconds,
            self.observer,
        )
        #: The worker's connection pool while it runs.
        self.store: AsyncStore | None = None
        self.stop_requested = asyncio.Event()
        self._stop_at_once = asyncio.Event()
        #: The executions in flight, by task id.
        self.running = Executions()
        #: How long it serves, and its periodic jobs (engine/modes.py).
        self.mode = modes.mode(self.options, self.queues, self.observer)
        #: The runners of those jobs while it serves (engine/services.py).
        self.jobs: list[Runner] = []
        self._slot_freed = asyncio.Event()
        #: The last claim, made on a notification, took every free slot.
        self._filled_when_told = False
        #: The threads of plain ``def`` steps while the worker runs; see
        #: engine/threads.py for what a stuck thread costs.
        self.threads: StepThreads | None = None
        self._stuck_reported = 0
        #: The wakeup thread's side of this worker (engine/attendance.py).
        self.attendance = Attendance(
            self.id,
            self.queues,
            statements,
            self.claims,
            self.running,
            self.observer,
            self._free_slots,
        )

    @property
    def status(self) -> Status | None:
        """The status job while serving: the runs waiting and the next wake-up, as last seen."""
        found = [runner.job for runner in self.jobs if isinstance(runner.job, Status)]
        return found[0] if found else None

    @property
    def wake_checks(self) -> list[int]:
        """Notifications another worker answered first, checked by this one:
        [left alone, woken for] (engine/wakeup.py)."""
        return self.attendance.wake_checks

    @property
    def stuck_threads(self) -> int:
        """Threads still running a call nobody waits for (a ``def`` step past its timeout)."""
        return self.threads.stuck if self.threads is not None else 0

    def request_stop(self, *, at_once: bool = False) -> None:
        """Stop claiming; finish in-flight work within ``shutdown_seconds``, release the rest.

        With ``at_once`` (a second SIGTERM or Ctrl-C), in-flight work is not
        waited for: it is handed back to the queue now, even if a first
        request is already waiting for it.
        """
        self.stop_requested.set()
        if at_once:
            self._stop_at_once.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self.stop_requested.is_set()

    @property
    def heartbeat_seconds(self) -> float:
        """Seconds between two heartbeats."""
        return self.options.heartbeat_interval

    async def run(self) -> None:
        """Serve until ``request_stop`` is called (or the task is cancelled)."""
        opts = self.options
        # Every connection of this worker is named perdure-worker-<id>[-kind],
        # so that pg_stat_activity tells whose it is.
        name = f"perdure-worker-{self.id}"[:50]
        store = AsyncStore(
            self.url,
            self.statements,
            min_size=1,
            max_size=opts.statement_pool_size,
            max_idle=10.0,
            name=name,
            unavailable=Disconnected,
            direct_url=self.direct_url,
        )
        outage_log.install()
        await store.open(timeout=opts.connect_seconds)
        self._loop = asyncio.get_running_loop()
        committer = Committer(store)
        env = self._environment(store, committer)
        wakeup = self.attendance.wakeup(
            store.endpoints.session_url, f"{name}-listen", opts, self._steps, env.lost_tasks
        )
        duty = self.attendance.heartbeat.duty if self.attendance.heartbeat else None
        self.jobs = [Runner(job, duty) for job in self.mode.jobs(store, self.attendance.nudge)]
        services = Services([wakeup, *self.jobs, committer])
        try:
            await self._register(store)
            await capacity.check(store, opts, name)
            self.store = store
            self.observer.worker_started(self)
            services.start()
            log.info(
                "worker %s serving queues %s with concurrency %d",
                self.id,
                self.queues,
                opts.concurrency,
            )
            await self._claim_loop(store, env, wakeup)
        finally:
            await self._shutdown(store, env)
            await services.stop()
            await self._close(store, env, committer)

    def _environment(self, store: AsyncStore, committer: Committer) -> ExecutionEnv:
        """What executions share: the store, the step threads, the group commit."""
        opts, loop = self.options, self._loop
        threads = self.threads = StepThreads(
            opts.concurrency * 2 + 4,
            on_stuck=self.observer.thread_stuck,
            on_freed=lambda stuck: loop.call_soon_threadsafe(self._thread_freed, stuck),
        )
        return ExecutionEnv(
            store,
            opts.lease_seconds,
            threads,
            self.max_payload_bytes,
            specs=self.specs,
            observer=self.observer,
            committer=committer,
            concurrency=opts.concurrency,
            detect_nondeterminism=opts.detect_nondeterminism,
        )

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

    async def _claim_loop(self, store: AsyncStore, env: ExecutionEnv, wakeup: Wakeup) -> None:
        """Claim and start work until stopped (or, inline, until nothing is due)."""
        backoff = 0.0
        while not self.stop_requested.is_set():
            # Set again by any slot freed from here on: the wait below ends at once.
            self._slot_freed.clear()
            try:
                timeout = await self._claim_pass(store, env, wakeup)
                backoff = 0.0
            except (Exception, Disconnected) as exc:
                # The database went away or refused us: back off (bounded, so a
                # long outage costs a reconnect attempt every few seconds, not
                # a busy loop) and try again without restarting the worker.
                backoff = min(max(backoff * 2, 0.25), 5.0)
                env.unheld.suspect = env.unheld.suspect or isinstance(exc, Disconnected)
                log.warning("claim failed (%s); retrying in %.2f s", exc, backoff)
                timeout = backoff
                wakeup.event.clear()
            if timeout == "done":
                return  # inline, and nothing left to do
            if not isinstance(timeout, str):  # "again" after a full batch: no wait
                await self._wait(wakeup.event, timeout)

    async def _claim_pass(
        self, store: AsyncStore, env: ExecutionEnv, wakeup: Wakeup
    ) -> float | Literal["again", "done"] | None:
        """Claim once; how long to wait then (None: until woken), or to claim again at
        once (a full batch), or that the loop is done (inline, nothing left)."""
        await env.unheld.recover(store, self.id, self.running)
        await self._report_stuck(store)
        await self.mode.before_claim(store)
        free = self._free_slots()
        if free <= 0:
            # Every slot is taken (by runs, or by stuck threads): claim
            # nothing until one frees up.
            self.observer.worker_full(self.stuck_threads)
            # A call heard now is answered when a slot frees (the loop then
            # claims what is due): left set, it would end every wait at once,
            # and the loop would spin until then.
            wakeup.event.clear()
            if self._filled_when_told:
                # Woken for work and filled by it: what is still due goes on
                # to the next worker now (one call heard for a burst of starts).
                self._filled_when_told = False
                await self.attendance.pass_on_async(store)
            return None
        want = min(free, self.options.claim_batch)
        told = wakeup.event.is_set()
        wakeup.event.clear()
        claimed = await self.claims.claim(store, want)
        for task in claimed:
            self._start(task, env)
        if len(claimed) == want:
            self._filled_when_told = told and want == free
            return "again"
        timeout = self._poll_seconds(wakeup)
        if claimed:
            # Let the executions just started reach their first await before
            # this loop's next query: a woken run's first step starts without
            # waiting for it.
            await asyncio.sleep(0)
        self.observer.worker_idle(free - len(claimed))
        due = await self.claims.next_due(store)
        if due is not None:
            # Due later: the first worker of the queue wakes for it on time,
            # the others a moment later, when it was taken (engine/attendance.py).
            timeout = min(timeout, due + self.attendance.lag() if due > 0 else 0.0)
            if due <= 0:
                # Claimable work was left behind: another worker was claiming
                # it, or its queue got a global limit since this worker last
                # looked. Look again, under the queue locks.
                self.claims.forget_limits()
        # A run that finished since the claim may have left work its limit
        # held back: look again before leaving.
        idle = not self.running and not self._slot_freed.is_set()
        return "done" if self.mode.finished(idle=idle, due=due) else timeout

    def _free_slots(self) -> int:
        """Slots for more runs: a stuck thread holds the slot of the step it ran
        (engine/threads.py), unless the mode does not wait for it."""
        stuck = self.stuck_threads if self.mode.counts_stuck_threads else 0
        return self.options.concurrency - len(self.running) - stuck

    def _poll_seconds(self, wakeup: Wakeup) -> float:
        """The fallback poll: rare while notifications wake the worker."""
        if wakeup.connected.is_set() and self.claims.unlimited:
            idle = min(self.options.idle_poll_seconds, NOTIFY_HORIZON_SECONDS)
            return max(idle, self.options.poll_seconds)
        return self.options.poll_seconds

    async def _wait(self, wake: asyncio.Event, timeout: float | None) -> None:
        """Sleep until a notification, a freed slot, a stop, or ``timeout`` s.

        A slot freed during this pass of the claim loop ends the wait at once:
        an execution that ended while the loop looked for due work must not
        leave it waiting for its poll.
        """
        until = math.inf if timeout is None else time.monotonic() + timeout
        self.attendance.wait_until = until
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
        self.running.add(task, job)

    async def _execute(
        self, task: ClaimedTask, spec: WorkflowSpec[Any], env: ExecutionEnv
    ) -> Outcome:
        """Execute ``task`` (engine/dispatch.py); then wake the other workers if its
        queue's limit counts across workers: they may be waiting for this slot."""
        result = await dispatch.execute(
            task, spec, env, stopping=self.stop_requested, ended=self._ended
        )
        if self.claims.is_limited(task.queue):
            with contextlib.suppress(Exception, Disconnected):
                await env.store.execute(self.statements.queues.wake(self.id))
        return result

    def _ended(self, task: ClaimedTask) -> None:
        """An execution ended: forget it and free its slot. Only this execution's
        entry: its task may have been handed back and claimed again already."""
        self.running.end(task)
        self._slot_freed.set()

    def _thread_freed(self, stuck: int) -> None:
        """A stuck thread returned: its slot is free (runs on the loop)."""
        self.observer.thread_freed(stuck)
        self._slot_freed.set()

    async def _report_stuck(self, store: AsyncStore) -> None:
        """Record this worker's stuck threads in the workers table when their number changed."""
        stuck = self.stuck_threads
        if stuck != self._stuck_reported:
            await store.execute(self.statements.workers.report_stuck(self.id, stuck))
            self._stuck_reported = stuck

    async def _shutdown(self, store: AsyncStore, env: ExecutionEnv) -> None:
        """Let in-flight work finish within ``shutdown_seconds``; cancel and hand back the
        rest, so that no transaction of this worker is left open once it has stopped."""
        seconds = self.options.shutdown_seconds
        deadline = time.monotonic() + seconds
        if self.running:
            log.info(
                "worker %s stopping: waiting up to %.0f s for %d run(s)",
                self.id,
                seconds,
                len(self.running),
            )
            await self.running.finish(store, seconds, self._stop_at_once)
        left = 0.0 if self._stop_at_once.is_set() else deadline - time.monotonic()
        await parallel.wind_down(env, left)
