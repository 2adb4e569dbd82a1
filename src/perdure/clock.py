"""The one clock every time comparison in perdure goes through.

SQL never calls ``now()`` directly: every named query compares times through
``coalesce(%(now)s, now())`` and every statement gets ``now`` from a
``Clock``. The system clock passes ``None``, so the server's own time is
used and workers on machines with skewed clocks still agree. A
[`VirtualClock`][perdure.VirtualClock] passes its own time, so tests move time instead of
sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class Clock:
    """The database server's clock: statements use the server's ``now()``."""

    def sql_now(self) -> datetime | None:
        """The time to compare with in SQL, or None for the server's own clock."""
        return None

    @property
    def is_virtual(self) -> bool:
        """True when time only moves when a test moves it."""
        return False

    def wall_now(self) -> datetime:
        """The time to stamp on records made in Python (a step's start)."""
        return self.sql_now() or datetime.now(UTC)


class VirtualClock(Clock):
    """A clock that stands still until [`advance`][perdure.VirtualClock.advance] moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        """Start at ``start`` (an aware datetime), or at the current UTC time."""
        if start is not None and start.tzinfo is None:
            raise ValueError("VirtualClock needs a timezone-aware start time")
        self._now = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def sql_now(self) -> datetime | None:
        """The virtual time."""
        with self._lock:
            return self._now

    @property
    def is_virtual(self) -> bool:
        """Always True."""
        return True

    def advance(
        self,
        delta: timedelta | None = None,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> datetime:
        """Move the clock forward and return the new time."""
        step = (delta or timedelta()) + timedelta(
            days=days, hours=hours, minutes=minutes, seconds=seconds
        )
        if step < timedelta():
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._now += step
            return self._now
