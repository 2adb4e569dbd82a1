"""The log records of a step attempt: captured while it runs, kept bounded.

The worker installs one ``logging`` handler on the root logger
(``install``). While a step attempt runs, ``capture`` makes a ``Captured``
buffer current in a context variable; the handler appends each record emitted
in that context to it: in the step's coroutine, and in its thread for a
``def`` step (it runs in a copy of the context). Records logged elsewhere (the
worker itself, another run) are not the step's and are not kept.

A buffer keeps at most ``MAX_RECORDS`` records and ``MAX_BYTES`` of message
text; past that it drops records and says ``truncated``. When the attempt
ends, ``records_json`` is what the store writes, once per attempt that logged
anything (an attempt that logged nothing costs no write).
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: At most this many records per attempt.
MAX_RECORDS = 200
#: At most this many bytes of formatted message text per attempt.
MAX_BYTES = 64 * 1024
#: perdure's own loggers: never a step's records.
_OWN = "perdure"

_CURRENT: contextvars.ContextVar[Captured | None] = contextvars.ContextVar(
    "perdure_step_logs", default=None
)
_installed = threading.Lock()
_handler: StepLogHandler | None = None


@dataclass
class Captured:
    """The records one step attempt emitted so far, bounded."""

    records: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0
    truncated: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: logging.LogRecord, message: str) -> None:
        """Keep ``record`` (its formatted ``message``) if the bounds allow, else mark truncated."""
        with self._lock:
            cost = len(message.encode("utf-8", "replace"))
            if len(self.records) >= MAX_RECORDS or self.size + cost > MAX_BYTES:
                self.truncated = True
                return
            self.size += cost
            self.records.append(
                {
                    "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
                    "level": record.levelname,
                    "logger": record.name,
                    "message": message,
                }
            )

    def records_json(self) -> str:
        """The records as the JSON array the store writes."""
        with self._lock:
            return json.dumps(self.records, ensure_ascii=False)


class StepLogHandler(logging.Handler):
    """Appends each record emitted inside a step attempt to that attempt's buffer."""

    def emit(self, record: logging.LogRecord) -> None:
        """Keep ``record`` if a step attempt is current in this context.

        Where logging has no handler but this one, the record also goes to
        ``logging.lastResort`` (stderr, WARNING and up), as it did before.
        """
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and _alone(record.name):
            last.handle(record)
        captured = _CURRENT.get()
        if captured is None or record.name.startswith(_OWN):
            return
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[0] is not None:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
        except Exception:  # a record whose arguments do not format: keep what it says
            message = str(record.msg)
        captured.add(record, message)


def _alone(name: str) -> bool:
    """Whether this handler is the only one a record of logger ``name`` reaches."""
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(h is not _handler for h in logger.handlers):
            return False
        if not logger.propagate:
            return True
        logger = logger.parent
    return True


def install() -> None:
    """Add the capturing handler to the root logger once per process (idempotent).

    The root logger's level still decides which records are emitted: with no
    logging configured it is WARNING, so a step's INFO records need
    ``logging.basicConfig(level=logging.INFO)`` (or the worker's ``--log-level``).
    """
    global _handler
    if _handler is not None:
        return
    with _installed:
        if _handler is None:
            handler = StepLogHandler(level=logging.NOTSET)
            logging.getLogger().addHandler(handler)
            _handler = handler


@contextmanager
def capture() -> Iterator[Captured]:
    """Make a new buffer current for the step attempt run inside the block."""
    install()
    captured = Captured()
    token = _CURRENT.set(captured)
    try:
        yield captured
    finally:
        _CURRENT.reset(token)
