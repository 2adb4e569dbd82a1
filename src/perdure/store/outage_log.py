"""Warnings of an unreachable database: one per interval, with a count of those held back.

While the server or the pooler is away, every pool reconnection attempt, every
failed claim, heartbeat and listener retry would log a warning of its own:
hundreds a second for one worker. ``install`` puts a filter on the loggers
that report them (psycopg's pool and perdure's own). A warning whose cause is
an unreachable database (see ``is_unavailable``)
passes as ``database unreachable: <reason> (<what failed>)`` at most once per
``INTERVAL_SECONDS`` for each thing that failed (claims, heartbeats, the
pool's reconnections) in a process, saying how many were held back since the
last one; the others are dropped. ``back`` reports the count still
held back once the database answers again. A warning about one run (it
carries the run's id) passes as it is: it comes once per run, not once per
retry. Any other record passes untouched.
"""

from __future__ import annotations

import logging
import threading
import time

from perdure.store.connect import is_unavailable

#: At most one "database unreachable" warning per this many seconds.
INTERVAL_SECONDS = 5.0

#: The loggers whose warnings report a lost database.
LOGGERS = (
    "psycopg.pool",
    "perdure.worker",
    "perdure.store",
    "perdure.commit",
    "perdure.maintenance",
    "perdure.wakeup",
    "perdure.schedules",
    "perdure.retention",
)


class OutageFilter(logging.Filter):
    """Lets one "database unreachable" warning of each kind through per interval, with a count.

    A kind is what failed (``claim failed``, ``heartbeat failed``, the pool's
    ``error connecting``), so that the log still shows each of the worker's
    loops that cannot reach the database, once per interval each.
    """

    def __init__(self) -> None:
        """No warning seen yet."""
        super().__init__()
        self._lock = threading.Lock()
        #: By kind: when one was last logged, and how many were held back since.
        self._kinds: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is logged (rewritten when it reports the lost database)."""
        if record.levelno != logging.WARNING or hasattr(record, "run_id"):
            # A warning about one run (it lost the database mid-execution)
            # comes once per run: it passes as it is.
            return True
        reason = _reason(record)
        if reason is None:
            return True
        where = _where(record)
        now = time.monotonic()
        with self._lock:
            last, held = self._kinds.get(where, (-float("inf"), 0))
            if now - last < INTERVAL_SECONDS:
                self._kinds[where] = (last, held + 1)
                return False
            self._kinds[where] = (now, 0)
        if held:
            record.msg = "database unreachable: %s (%s; %d more in the last %g s)"
            record.args = (reason, where, held, INTERVAL_SECONDS)
        else:
            record.msg = "database unreachable: %s (%s)"
            record.args = (reason, where)
        return True

    def take_held(self) -> int:
        """The warnings held back since the last ones logged; counted afresh from now."""
        with self._lock:
            held = sum(n for _, n in self._kinds.values())
            self._kinds.clear()
        return held


_FILTER = OutageFilter()
_INSTALLED = threading.Lock()


def install() -> OutageFilter:
    """Put the filter on ``LOGGERS`` (once per process), counting afresh; the filter."""
    _FILTER.take_held()
    with _INSTALLED:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
    return _FILTER


def back(log: logging.Logger, detail: str = "") -> None:
    """Report that the database answers again, with the warnings held back, if any."""
    held = _FILTER.take_held()
    if held or detail:
        more = f" ({held} warning(s) held back)" if held else ""
        log.info("database reachable again%s%s", f": {detail}" if detail else "", more)


def _reason(record: logging.LogRecord) -> str | None:
    """The short reason of a warning about the lost database, or None for any other."""
    args = record.args if isinstance(record.args, tuple) else ()
    for arg in args:
        if isinstance(arg, BaseException):
            cause = arg if arg.__cause__ is None else arg.__cause__
            if is_unavailable(cause) or is_unavailable(arg):
                return short(cause)
    if record.name == "psycopg.pool":
        # A broken or closed connection discarded, a reconnection round given up.
        return "connection lost"
    return None


def _where(record: logging.LogRecord) -> str:
    """What was being done, from the original message: ``claim failed``, ``heartbeat failed``."""
    text = str(record.msg).replace(" in %r", "").replace(" %r", "")
    return text.split(" (", 1)[0].split(":", 1)[0].replace("%s", "").strip()


def short(error: BaseException | str) -> str:
    """The gist of a connection error: ``connection refused`` rather than libpq's paragraph."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    gist = text.rsplit(": ", 1)[-1].strip()
    return (gist[:1].lower() + gist[1:]) if gist else text
