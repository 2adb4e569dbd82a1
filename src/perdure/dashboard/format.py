"""How the dashboard writes values: relative times, durations, ids, JSON, status colours.

Pure functions, registered as Jinja2 filters by ``perdure.dashboard.app``.
They return plain text; Jinja2's autoescape makes it safe in the page.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

#: Statuses grouped by what they mean to a reader: the colour of their badge.
TONES: dict[str, str] = {
    "queued": "live",
    "running": "active",
    "waiting": "waiting",
    "paused": "paused",
    "compensating": "warn",
    "completed": "ok",
    "failed": "bad",
    "cancelled": "muted",
    "compensated": "bad",
    "compensation_failed": "bad",
    "continued": "ok",
    # step statuses
    "pending": "live",
    "retrying": "warn",
    "timed_out": "bad",
    "skipped": "muted",
    # update statuses
    "requested": "live",
    "accepted": "active",
    "rejected": "warn",
    # schedule states
    "active": "ok",
    # worker statuses
    "stopped": "muted",
    "lost": "bad",
}


def tone(status: object) -> str:
    """The colour family of a run, step or worker status (a CSS class suffix)."""
    return TONES.get(str(getattr(status, "value", status)), "muted")


def now() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def ago(when: datetime | None, reference: datetime | None = None) -> str:
    """``12 s ago``, ``3 min ago``, ``in 5 min``; ``-`` for None."""
    if when is None:
        return "-"
    seconds = ((reference or now()) - when).total_seconds()
    text = span(abs(seconds), coarse=True)
    if abs(seconds) < 1:
        return "just now"
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def due(when: datetime | str | None, reference: datetime | None = None) -> str:
    """``due in 12 min`` for a wake-up or timeout; empty when there is none.

    A wait without a timeout is stored with a wake time a century ahead;
    anything more than ten years away reads as no deadline.
    """
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            return ""
    if when is None or (when - (reference or now())).days > 3650:
        return ""
    return f"due {ago(when, reference)}"


def span(seconds: float | None, *, coarse: bool = False) -> str:
    """A duration for people: ``85 ms``, ``2.4 s``, ``3 min 05 s``, ``2 h 10 min``, ``3 d 4 h``.

    ``coarse`` keeps only the largest unit (for relative times).
    """
    if seconds is None:
        return "-"
    seconds = max(float(seconds), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    units = ((86400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s"))
    for size, name, small, small_name in units:
        if whole >= size:
            big, rest = divmod(whole, size)
            if coarse:
                return f"{big} {name}"
            return f"{big} {name} {rest // small:02d} {small_name}"
    return f"{whole} s"


def between(start: datetime | None, end: datetime | None) -> str:
    """How long from ``start`` to ``end`` (to now while ``end`` is None)."""
    if start is None:
        return "-"
    return span(((end or now()) - start).total_seconds())


def stamp(when: datetime | None) -> str:
    """An absolute UTC time to the millisecond, for tooltips and tables."""
    if when is None:
        return "-"
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def tail(value: object, keep: int = 12) -> str:
    """The end of an id (a time-ordered id differs at its end): ``…49633e43b449``."""
    text = str(value or "")
    return text if len(text) <= keep else "…" + text[-keep:]


def pretty(value: Any) -> str:
    """A JSON value indented for reading."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def compact(value: Any, limit: int = 120) -> str:
    """A JSON value on one line, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def number(value: int | None, cap: int | None = None) -> str:
    """``1,234``; ``10,000+`` when a capped count reached its cap."""
    if value is None:
        return "-"
    text = f"{value:,}"
    return f"{text}+" if cap is not None and value >= cap else text


FILTERS = {
    "ago": ago,
    "between": between,
    "compact": compact,
    "due": due,
    "number": number,
    "pretty": pretty,
    "span": span,
    "stamp": stamp,
    "tail": tail,
    "tone": tone,
}
