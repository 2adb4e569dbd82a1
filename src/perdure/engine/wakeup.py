"""LISTEN/NOTIFY: wake an idle worker the moment work becomes claimable.

The ``tasks`` triggers NOTIFY ``<schema>_wakeup`` when a task becomes ready
now. A worker holds one dedicated connection that LISTENs on that channel and
sets an event on every notification. If that connection drops, the worker
keeps polling (the fallback) while the listener reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import logging

from perdure.store import session

log = logging.getLogger("perdure.wakeup")


class Wakeup:
    """A background LISTEN loop that sets :attr:`event` on each notification."""

    def __init__(self, url: str, channel: str, application_name: str = "perdure-listen") -> None:
        """Listen on ``channel`` of the server at ``url`` once :meth:`start` is called."""
        self.url = url
        self.channel = channel
        self.application_name = application_name
        self.event = asyncio.Event()
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start listening in the background."""
        self._task = asyncio.create_task(self._listen(), name="perdure-listen")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            try:
                async with session.listen(
                    self.url, self.channel, self.application_name
                ) as notifications:
                    self.connected.set()
                    # Anything that became ready while we were not listening is
                    # found by one claim attempt.
                    self.event.set()
                    delay = 0.1
                    async for _ in notifications:
                        self.event.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.connected.clear()
                log.warning("listener lost its connection (%s); retrying in %.1f s", exc, delay)
                self.event.set()
                await asyncio.sleep(delay)
                # Capped, like the pools' reconnection: back within a few
                # seconds of the server, a handful of attempts a minute.
                delay = min(delay * 2, 5.0)
