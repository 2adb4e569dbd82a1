"""The worker's own thread: LISTEN/NOTIFY wakeups, and chores that must not wait for the loop.

The ``tasks`` triggers NOTIFY ``<schema>_wakeup`` (the payload: the task's
queue) when a task becomes ready. A worker holds one dedicated connection
(the direct URL: LISTEN needs a session) on a thread of its own, which sets
``Wakeup.event`` on the event loop when a notification is its to answer.
PostgreSQL delivers a notification to every session listening on its
channel, so only the first LISTENERS workers of a queue listen on the shared
channel (``shared()``). The first WINDOW workers, and any worker with work
in hand, also listen on a channel of their own (``own()``), for a call
passed on to it alone by a worker too busy to answer it. The server signals
every session of the database that holds a LISTEN for each notification,
whatever its channel, so an idle worker beyond those holds none at all: what
a start costs, workers and server, does not grow with the fleet's size. Such
a worker learns of work left waiting at its heartbeat (engine/maintenance.py).
Between notifications, at least every ``TICK_SECONDS``, the thread runs
its chores (the heartbeat, the loop watch): they go on while the event loop
is blocked by a step that does not yield. If the connection drops, the
worker polls (the fallback) while the thread reconnects with backoff; the
chores are still run, without a session.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from perdure.store.listener import Listener

log = logging.getLogger("perdure.wakeup")

#: The longest the thread waits for a notification before its chores run...
TICK_SECONDS = 0.2
#: ...and at most this while the worker executes no run (nothing then needs
#: the loop watched): an idle fleet's threads wake once a second, not five
#: times. A short lease shortens it (a claim is beaten for within a few ticks).
IDLE_TICK_SECONDS = 1.0

#: How long after a notification the second worker of a queue checks that
#: the first took the work (see ``Wakeup``)...
CONFIRM_SECONDS = 0.01
#: ...and when the others check, each STAGGER_SECONDS after the previous one,
#: in waves of STAGGER_WAVE workers: at most about 0.3 s late, whatever the
#: size of the fleet.
LATE_CONFIRM_SECONDS = 0.2
STAGGER_SECONDS = 0.004
STAGGER_WAVE = 25
#: How many workers of a queue (the first by id) listen on the shared
#: channel: the first answers, the second covers for it at once when it is
#: gone or slow. Either, full, passes the call on to the next worker that
#: listens on its own channel (engine/attendance.py), so a third would only
#: add a check to every start.
LISTENERS = 2
#: How many workers of a queue (the first by id) listen on a channel of their
#: own while idle: the calls a full worker passes on go to them (and to any
#: worker with work in hand), so a burst reaches that many idle workers at once.
WINDOW = 8
#: The place of a call passed on to this worker alone: it checks at once.
FORWARDED = -1


class Chore(Protocol):
    """Work the wakeup thread does between notifications."""

    def tend(self, listener: Listener | None) -> None:
        """Do what is due now; ``listener`` is None while disconnected.

        An error raised with a listener drops its connection (and reconnects).
        """


class Wakeup:
    """A thread LISTENing on a channel, setting ``event`` for the notifications
    this worker is to answer.

    Every worker of a fleet gets every notification, though one task is ready.
    Were they all to claim at once, they would race for it and slow the one
    that wins, and each loser would spend two queries finding nothing (the
    thundering herd). So ``place(payload)`` says where this worker stands for
    it: ``None``, not its business (a queue it does not serve, its own
    payload); ``0``, it answers at once (the first live worker serving that
    queue); ``1``, it checks ``CONFIRM_SECONDS`` later, with
    ``confirm(listener)`` (one cheap query on this thread), whether work is
    left that it should wake up for: the first worker was full, dead or
    slow (or, for work due later, when to check again: only the first
    worker sets a timer for it); ``n > 1``, it checks ``LATE_CONFIRM_SECONDS + (n - 2) %
    STAGGER_WAVE * STAGGER_SECONDS`` later, for when the first two were.
    A check pending covers the notifications that come before it is made:
    however many come, a worker checks at most about five times a second.
    Only the workers that ``shared()`` says so listen on the shared channel
    (their ranks are below LISTENERS); with ``own_channel``, while ``own()``
    says so, a call passed on to this worker alone (the workers before it
    full) is checked at once.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        application_name: str = "perdure-listen",
        chores: Sequence[Chore] = (),
        place: Callable[[str], int | None] = lambda payload: 0,
        confirm: Callable[[Listener], bool | float] = lambda listener: True,
        own_channel: str | None = None,
        shared: Callable[[], bool] = lambda: True,
        own: Callable[[], bool] = lambda: True,
        busy: Callable[[], bool] = lambda: True,
        idle_tick: float = IDLE_TICK_SECONDS,
    ) -> None:
        """Listen on ``channel`` of the server at ``url`` once ``start`` is called
        (while ``shared()`` says so), and on ``own_channel`` if given (while
        ``own()`` says so)."""
        self.url = url
        self.channel = channel
        self.own_channel = own_channel
        self.shared = shared
        self.own = own
        #: Whether the worker executes runs: its chores then run every TICK_SECONDS,
        #: else every ``idle_tick`` s.
        self.busy = busy
        self.idle_tick = max(idle_tick, TICK_SECONDS)
        #: Whether the connection LISTENs on the shared channel now.
        self.listening_shared = False
        #: Whether it LISTENs on ``own_channel`` now.
        self.listening_own = False
        self.application_name = application_name
        self.chores = list(chores)
        self.place = place
        self.confirm = confirm
        #: How many waits for a notification the thread has ended: a notification
        #: sent before one wait began has been heard by the end of the next.
        self.rounds = 0
        #: When this thread checks for work left after a notification (monotonic).
        self._confirm_at: float | None = None
        self.event = asyncio.Event()
        #: Set while the LISTEN connection is up (read from any thread).
        self.connected = threading.Event()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: A pipe whose write end ``stop`` writes to: it ends the thread's wait
        #: for a notification at once, instead of at the next tick.
        self._interrupt: tuple[int, int] | None = None

    def start(self) -> None:
        """Start the thread; call it from the event loop it wakes."""
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._interrupt = os.pipe()
        self._thread = threading.Thread(target=self._run, name="perdure-listen", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop the thread (at once, even in its wait) and close its connection."""
        thread, self._thread = self._thread, None
        interrupt = self._interrupt
        if thread is not None:
            self._stopping.set()
            if interrupt is not None:
                os.write(interrupt[1], b"x")
            await asyncio.to_thread(thread.join, 10.0)
            if thread.is_alive():
                return  # the thread may still wait on the pipe: leave it open
        self._interrupt = None
        if interrupt is not None:
            for fd in interrupt:
                os.close(fd)

    def wake(self) -> None:
        """Set ``event`` on the event loop (from any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.event.set)

    def _notified(self, channel: str, payload: str) -> None:
        place = FORWARDED if channel == self.own_channel else self.place(payload)
        if place is None:
            return
        if place == 0:
            self.wake()
            return
        at = time.monotonic() + (0.0 if place == FORWARDED else CONFIRM_SECONDS)
        if place > 1:
            at += LATE_CONFIRM_SECONDS + (place - 2) % STAGGER_WAVE * STAGGER_SECONDS
        if self._confirm_at is None or at < self._confirm_at:
            self._confirm_at = at

    def _listen(self, listener: Listener) -> None:
        """Wait for one notification (or the next check, or a tick), then act."""
        timeout = TICK_SECONDS if self.busy() else self.idle_tick
        if self._confirm_at is not None:
            timeout = min(timeout, max(self._confirm_at - time.monotonic(), 0.0))
        interrupt = self._interrupt
        came = listener.wait_on(timeout, None if interrupt is None else interrupt[0])
        self.rounds += 1
        if came is not None:
            self._notified(*came)
        if self._confirm_at is not None and time.monotonic() >= self._confirm_at:
            self._confirm_at = None
            found = self.confirm(listener)
            if isinstance(found, bool):
                if found:
                    self.wake()
            else:  # work due later: check again then
                self._confirm_at = time.monotonic() + found

    def _sync(self, listener: Listener) -> None:
        """LISTEN on the shared channel and on this worker's own, or stop, as
        ``shared()`` and ``own()`` now say."""
        want = self.shared()
        if want != self.listening_shared:
            listener.listen(self.channel, on=want)
            self.listening_shared = want
        want = self.own_channel is not None and self.own()
        if want != self.listening_own:
            assert self.own_channel is not None
            listener.listen(self.own_channel, on=want)
            self.listening_own = want

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
                with Listener(self.url, None, self.application_name) as listener:
                    self.listening_shared = self.listening_own = False
                    self._sync(listener)
                    self.connected.set()
                    # Anything that became ready while we were not listening is
                    # found by one claim attempt.
                    self.wake()
                    delay = 0.1
                    while not self._stopping.is_set():
                        self._listen(listener)
                        self._tend(listener)
                        self._sync(listener)
            except Exception as exc:
                self.connected.clear()
                if self._stopping.is_set():
                    return
                log.warning("listener lost its connection (%s); retrying in %.1f s", exc, delay)
                self.wake()
                waited = 0.0
                while waited < delay and not self._stopping.wait(TICK_SECONDS):
                    waited += TICK_SECONDS
                    self._tend(None)
                # Capped, like the pools' reconnection: back within a few
                # seconds of the server, a handful of attempts a minute.
                delay = min(delay * 2, 5.0)
        self.connected.clear()
