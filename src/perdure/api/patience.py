"""Ride out a database outage in the App calls that wait.

``result``, ``get_event`` and ``read_stream`` (sync and async) wait up to a
timeout for something a worker does. A failover or a restart of the server in
that time is part of the wait: the statement is tried again, with backoff,
until it answers or the caller's deadline passes; only then does
DatabaseUnavailable reach the caller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from perdure.errors import DatabaseUnavailable

T = TypeVar("T")
log = logging.getLogger("perdure.app")

#: The longest pause between two attempts while the database is away.
MAX_PAUSE = 1.0

#: A statement tried at or after the deadline still gets this long to answer.
LAST_TRY_SECONDS = 1.0


async def patiently(call: Callable[[], Awaitable[T]], deadline: float | None) -> T:
    """Await ``call()``, trying again while the database is unreachable, until ``deadline``.

    ``deadline`` is a ``time.monotonic()`` value; None waits as long as it
    takes. Each attempt is bounded by the time left, so that a pool waiting
    for a connection does not outlast the caller's timeout.
    """
    pause = 0.05
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), LAST_TRY_SECONDS)
        try:
            return await asyncio.wait_for(call(), left)
        except (DatabaseUnavailable, TimeoutError) as exc:
            if deadline is not None and time.monotonic() >= deadline:
                if isinstance(exc, DatabaseUnavailable):
                    raise
                raise DatabaseUnavailable(
                    "PostgreSQL did not answer before the timeout ended"
                ) from exc
            log.warning("database unreachable while waiting (%s); trying again", exc)
            wait = pause if deadline is None else min(pause, deadline - time.monotonic())
            await asyncio.sleep(max(wait, 0.0))
            pause = min(pause * 2, MAX_PAUSE)
