"""The worker's background services, and the one runner every periodic service runs under.

A service is anything with ``start()`` and ``async stop()``: the wakeup's
LISTEN connection, the group commit's lanes, and each periodic job (the
reaper, the status report, the schedule ticker, retention: see
``perdure.engine.housekeeping``), which ``Runner`` runs as a background
task. The runner starts the job, runs it only while the worker holds the
fleet's duties if the job is the duty holder's, restarts it with a capped
backoff when it fails, and logs each failure and restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger("perdure.services")

#: Seconds between two checks of the duty flag by a job that runs on duty.
DUTY_CHECK_SECONDS = 1.0
#: The first wait before a failed job restarts, doubled at each failure in a
#: row up to RESTART_MAX_SECONDS.
RESTART_SECONDS = 0.5
RESTART_MAX_SECONDS = 30.0


class Service(Protocol):
    """Something that runs beside the claim loop while a worker serves."""

    def start(self) -> None:
        """Start running in the background."""

    async def stop(self) -> None:
        """Stop; safe to call when never started."""


class Job(Protocol):
    """A periodic job: runs until cancelled; the runner restarts it if it raises."""

    #: Its name, in logs and in the task's name (``perdure-<name>``).
    name: str
    #: Whether only the fleet's duty holder runs it.
    on_duty: bool

    async def run(self) -> None:
        """Do the job until cancelled."""


class Runner:
    """Runs a ``Job`` as a service: gated by ``duty`` when the job is on duty,
    restarted with a capped backoff when it fails, cancelled by ``stop``."""

    def __init__(
        self,
        job: Job,
        duty: threading.Event | None = None,
        *,
        check_seconds: float = DUTY_CHECK_SECONDS,
        restart_seconds: float = RESTART_SECONDS,
        restart_max_seconds: float = RESTART_MAX_SECONDS,
    ) -> None:
        """Run ``job`` once started; ``duty`` is required when ``job.on_duty``."""
        if job.on_duty and duty is None:
            raise ValueError(f"the {job.name} job runs on duty: it needs the duty flag")
        self.job = job
        self.duty = duty if job.on_duty else None
        self.check_seconds = check_seconds
        self.restart_seconds = restart_seconds
        self.restart_max_seconds = restart_max_seconds
        #: How many times the job failed and was started again.
        self.restarts = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The job's name."""
        return self.job.name

    def start(self) -> None:
        """Start the job's supervising task."""
        self._task = asyncio.create_task(self._supervise(), name=f"perdure-{self.job.name}")

    async def stop(self) -> None:
        """Cancel the job and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _on_duty(self) -> bool:
        return self.duty is None or self.duty.is_set()

    async def _supervise(self) -> None:
        delay = self.restart_seconds
        while True:
            while not self._on_duty():
                await asyncio.sleep(self.check_seconds)
            began = time.monotonic()
            job = asyncio.create_task(self.job.run(), name=f"perdure-{self.job.name}-job")
            try:
                while not job.done() and self._on_duty():
                    await asyncio.wait({job}, timeout=self.check_seconds)
            finally:
                if not job.done():
                    job.cancel()
                await asyncio.gather(job, return_exceptions=True)
            if job.cancelled():
                delay = self.restart_seconds  # the duty moved on: wait for it again
                continue
            exc = job.exception()
            if exc is None:
                log.info("%s job ended", self.job.name)
                return
            self.restarts += 1
            if time.monotonic() - began > self.restart_max_seconds:
                delay = self.restart_seconds  # it had been running well: not a failure in a row
            log.error(
                "%s job failed (%r); restarting in %.1f s",
                self.job.name,
                exc,
                delay,
                exc_info=exc,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.restart_max_seconds)


class Services:
    """Services started in order and stopped in the reverse order."""

    def __init__(self, services: Sequence[Service]) -> None:
        """Manage ``services``."""
        self.services = list(services)

    def start(self) -> None:
        """Start every service, in order."""
        for service in self.services:
            service.start()

    async def stop(self) -> None:
        """Stop every service, the last started first."""
        for service in reversed(self.services):
            await service.stop()
