"""Run listings: the page cursors of ``list_runs``.

A cursor is the (created_at, id) of the last run of a page, encoded as an
opaque URL-safe string; the next page starts strictly after it in the order
``created_at DESC, id DESC``. Runs started after the first page was read are
newer than it, so paging on never repeats or skips a run.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any

from perdure.engine import arguments
from perdure.errors import ConfigurationError
from perdure.types import Run, RunPage

#: The largest page ``list_runs`` returns.
MAX_LIMIT = 10_000


def encode_cursor(run: Run) -> str:
    """The cursor of the page that follows ``run``."""
    text = json.dumps([run.created_at.isoformat(), run.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> tuple[datetime, str]:
    """The (created_at, id) a cursor stands for; ConfigurationError if it is not one."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > 200:
        raise ConfigurationError(f"cursor must be a cursor from a previous page, not {cursor!r}")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        at = datetime.fromisoformat(created)
        if at.tzinfo is None:
            raise ValueError("naive time")
        return at, str(uuid.UUID(run_id))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ConfigurationError(
            f"cursor {cursor!r} is not a cursor from a previous page of runs"
        ) from None


def page(found: list[Run], limit: int) -> RunPage:
    """A page of at most ``limit`` runs from ``found`` (read with ``limit + 1``).

    The extra row only tells whether another page follows: a last page that
    happens to be full gets no cursor, so no caller asks for an empty page.
    """
    runs = found[:limit]
    more = len(found) > limit
    return RunPage(runs, encode_cursor(runs[-1]) if more and runs else None)


def check_limit(limit: Any) -> int:
    """``limit`` if it is a page size from 1 to ``MAX_LIMIT``."""
    return arguments.integer("limit", limit, minimum=1, maximum=MAX_LIMIT)
