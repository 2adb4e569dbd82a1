"""Structured logs: JSON lines that carry the run, step and worker of each record.

perdure logs through the standard ``logging`` module, on loggers under
``perdure.*``. Each record about a run or a step has the attributes ``run_id``,
``workflow``, ``step``, ``attempt`` and ``worker_id`` (set through ``extra``).
``JsonFormatter`` prints them; ``LogContextFilter`` gives them to
records that the workflow's own code logs while a step runs.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from perdure.engine.observer import LOG_FIELDS, log_fields

#: ``perdure worker --log-format text``: one line per record, the fields of
#: a run or step appended when the record has them.
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


class LogContextFilter(logging.Filter):
    """Give a record the fields of the run and step executing in its context.

    Attach it to a handler: every record the handler emits while a perdure
    task executes (your step's own ``logger.info(...)`` included) then has
    ``run_id``, ``workflow``, ``step``, ``attempt`` and ``worker_id``. Fields
    the record already has are kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the missing fields; never drops a record."""
        for key, value in log_fields().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the run's fields.

    The run's fields (``run_id``, ``workflow``, ``step``, ``attempt``,
    ``worker_id``) appear when the record has them; an exception appears as
    ``error`` (its type and message) and ``traceback``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in LOG_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, then ``[run_id=... step=...]`` when the record has those fields."""

    def __init__(self) -> None:
        """The text format of ``perdure worker``."""
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """The record, then its run's fields."""
        text = super().format(record)
        fields = [
            f"{key}={value}"
            for key in LOG_FIELDS
            if (value := getattr(record, key, None)) is not None and key != "worker_id"
        ]
        if not fields:
            return text
        # The worker id is the same on every line of one worker: left out here.
        head, newline, rest = text.partition("\n")
        return f"{head} [{' '.join(fields)}]{newline}{rest}"


def configure_logging(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) at ``level`` in ``fmt`` (``text`` or ``json``).

    What ``perdure worker --log-level --log-format`` does. The handler carries
    a ``LogContextFilter``, so records logged by workflow code while a
    step runs carry the step's fields too.
    """
    if fmt not in LOG_FORMATS:
        from perdure.errors import ConfigurationError

        raise ConfigurationError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(LogContextFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
