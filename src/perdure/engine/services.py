"""The worker's background services, started together and stopped together.

A service is anything with ``start()`` and ``async stop()``: the wakeup's
LISTEN connection, the group commit's lanes, and each periodic loop (the
heartbeat, the reaper, the status report, the schedule ticker, retention),
which ``Loop`` runs as a background task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol


class Service(Protocol):
    """Something that runs beside the claim loop while a worker serves."""

    def start(self) -> None:
        """Start running in the background."""

    async def stop(self) -> None:
        """Stop; safe to call when never started."""


class Loop:
    """A periodic coroutine as a service: a task from ``start``, cancelled by ``stop``."""

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``run()`` as the task ``perdure-<name>`` once started."""
        self.name = name
        self.run = run
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop's task."""
        self._task = asyncio.create_task(self.run(), name=f"perdure-{self.name}")

    async def stop(self) -> None:
        """Cancel the loop's task and wait for it to end (its error, if any, is dropped)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


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
