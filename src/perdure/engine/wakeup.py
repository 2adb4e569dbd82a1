"""The worker's own thread: LISTEN/NOTIFY wakeups, and chores that must not wait for the loop.

The ``tasks`` triggers NOTIFY ``<schema>_wakeup`` when a task becomes ready
now. A worker holds one dedicated connection (the direct URL: LISTEN needs a
session) on a thread of its own, which sets :attr:`Wakeup.event` on the
event loop at each notification. Between notifications, at least every
:data:`TICK_SECONDS`, the thread runs its chores (the heartbeat, the loop
watch): they go on while the event loop is blocked by a step that does not
yield. If the connection drops, the worker polls (the fallback) while the
thread reconnects with backoff; the chores are still run, without a session.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from perdure.store.listener import Listener

log = logging.getLogger("perdure.wakeup")

#: The longest the thread waits for a notification before its chores run.
TICK_SECONDS = 0.2

#: How much later than the previous one each worker of a fleet answers a
#: notification (see :class:`Wakeup`), in waves of STAGGER_WAVE workers: at
#: most about 0.1 s late, whatever the size of the fleet.
STAGGER_SECONDS = 0.004
STAGGER_WAVE = 25


class Chore(Protocol):
    """Work the wakeup thread does between notifications."""

    def tend(self, listener: Listener | None) -> None:
        """Do what is due now; ``listener`` is None while disconnected.

        An error raised with a listener drops its connection (and reconnects).
        """


class Wakeup:
    """A thread LISTENing on a channel, setting :attr:`event` on each notification.

    Every worker of a fleet gets every notification, though one task is ready.
    Were they all to claim at once, they would race for it and slow the one
    that wins (no thundering herd): each waits ``rank() % STAGGER_WAVE *
    STAGGER_SECONDS`` first, where ``rank()`` is its place in the fleet (0 for
    the first). The first worker with a free slot takes the task; the others
    look a moment later and find it gone, one at a time.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        application_name: str = "perdure-listen",
        chores: Sequence[Chore] = (),
        rank: Callable[[], int] = lambda: 0,
        own: str | None = None,
    ) -> None:
        """Listen on ``channel`` of the server at ``url`` once :meth:`start` is called;
        notifications whose payload is ``own`` (sent by this worker) are ignored."""
        self.url = url
        self.channel = channel
        self.application_name = application_name
        self.chores = list(chores)
        self.rank = rank
        self.own = own
        self.event = asyncio.Event()
        #: Set while the LISTEN connection is up (read from any thread).
        self.connected = threading.Event()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; call it from the event loop it wakes."""
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="perdure-listen", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop the thread and close its connection."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            await asyncio.to_thread(thread.join, 10.0)

    def _wake(self, delay: float = 0.0) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if delay <= 0:
            loop.call_soon_threadsafe(self.event.set)
        else:
            loop.call_soon_threadsafe(loop.call_later, delay, self.event.set)

    def _tend(self, listener: Listener | None) -> None:
        for chore in self.chores:
            if listener is not None:
                chore.tend(listener)
                continue
            try:
                chore.tend(None)
            except Exception:
                log.exception("a chore of the wakeup thread failed")

    def _run(self) -> None:
        delay = 0.1
        while not self._stopping.is_set():
            try:
                with Listener(self.url, self.channel, self.application_name) as listener:
                    self.connected.set()
                    # Anything that became ready while we were not listening is
                    # found by one claim attempt.
                    self._wake()
                    delay = 0.1
                    while not self._stopping.is_set():
                        if listener.wait(TICK_SECONDS, self.own):
                            self._wake(self.rank() % STAGGER_WAVE * STAGGER_SECONDS)
                        self._tend(listener)
            except Exception as exc:
                self.connected.clear()
                if self._stopping.is_set():
                    return
                log.warning("listener lost its connection (%s); retrying in %.1f s", exc, delay)
                self._wake()
                waited = 0.0
                while waited < delay and not self._stopping.wait(TICK_SECONDS):
                    waited += TICK_SECONDS
                    self._tend(None)
                # Capped, like the pools' reconnection: back within a few
                # seconds of the server, a handful of attempts a minute.
                delay = min(delay * 2, 5.0)
        self.connected.clear()
