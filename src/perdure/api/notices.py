"""Waking callers that wait for a run's events or stream values.

``app.get_event`` and ``app.read_stream`` wait on ``Notices``: one
connection per App, opened on the first wait, LISTENs on ``<schema>_messages``
(the events and streams tables' triggers NOTIFY it with the run's id). A
waiter looks again when its run published, or at the fallback interval (for a
run that finished without publishing, or while the listener reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from perdure.store import session

log = logging.getLogger("perdure.api")

#: The longest a waiter goes without looking again, notification or not.
FALLBACK_SECONDS = 0.5


class Watch:
    """One waiter's view of a run's publications."""

    def __init__(self) -> None:
        """Not woken yet."""
        self.woken = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Return once the run published since the last wait, or after ``timeout`` s
        (at most the fallback interval)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), min(timeout, FALLBACK_SECONDS))
        self.woken.clear()


class Notices:
    """The runs' publications, as events a waiter can wait on (on the App's portal loop)."""

    def __init__(self, url: str, channel: str) -> None:
        """Listen on ``channel`` of the server at ``url`` once something waits."""
        self.url = url
        self.channel = channel
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        #: Set once the listener holds its connection (tests and benchmarks wait on it).
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[Watch]:
        """Watch run ``run_id`` for as long as the block runs.

        Take the watch before the first look, so that nothing published
        between a look and the wait after it goes unnoticed.
        """
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="perdure-messages")
        watch = Watch()
        self._waiters.setdefault(run_id, set()).add(watch.woken)
        try:
            yield watch
        finally:
            waiting = self._waiters.get(run_id)
            if waiting is not None:
                waiting.discard(watch.woken)
                if not waiting:
                    del self._waiters[run_id]

    def _wake(self, run_id: str | None = None) -> None:
        for key, events in self._waiters.items():
            if run_id is None or key == run_id:
                for event in events:
                    event.set()

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            try:
                async with session.listen(
                    self.url, self.channel, "perdure-app-messages"
                ) as notifications:
                    self.listening.set()
                    # What was published while no one listened is found by a look.
                    self._wake()
                    delay = 0.1
                    async for notification in notifications:
                        self._wake(notification.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                log.warning("message listener lost its connection (%s)", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        """Stop listening."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
