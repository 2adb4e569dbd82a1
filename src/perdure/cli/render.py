"""Shared output helpers for the commands: tables, statuses, times, durations and JSON.

Every value that comes from the database (names, keys, error messages) is put in
a ``rich.text.Text``, never in a markup string, so a ``[`` in user data is
printed as it is. JSON output goes through ``echo_json``, with nothing else
on stdout, so it can be piped into other tools.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

STATUS_STYLES: dict[str, str] = {
    "queued": "cyan",
    "running": "bold blue",
    "waiting": "magenta",
    "paused": "yellow",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "dim",
    "retrying": "yellow",
    "compensating": "bold yellow",
    "compensated": "red",
    "compensation_failed": "bold red reverse",
    "continued": "green",
    "pending": "cyan",
    "skipped": "dim",
}

# Live statuses first, then final ones: the order the lifecycle goes.
STATUS_ORDER = (
    "queued",
    "running",
    "waiting",
    "paused",
    "compensating",
    "completed",
    "failed",
    "cancelled",
    "compensated",
    "compensation_failed",
)

NONE = "-"
PIPE_WIDTH = 160
_PASSWORD = re.compile(r"(password=)[^&\s]*", re.IGNORECASE)


def console() -> Console:
    """A console on the current stdout, for tables.

    On a terminal it takes the terminal's width. Piped output has no width to
    fit, so unless ``COLUMNS`` says otherwise it gets ``PIPE_WIDTH``
    columns rather than rich's 80, and long ids are not cut.
    """
    out = Console(highlight=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out = Console(highlight=False, width=PIPE_WIDTH)
    return out


def err_console() -> Console:
    """A console on stderr, for messages that must not mix with the command's output."""
    return Console(stderr=True, highlight=False)


def status_text(status: str | enum.Enum | None) -> Text:
    """The status word in its colour."""
    if status is None:
        return Text(NONE)
    value = status.value if isinstance(status, enum.Enum) else str(status)
    return Text(value, style=STATUS_STYLES.get(value, ""))


def text(value: object, style: str = "") -> Text:
    """A plain cell: ``-`` for None, the value as literal text otherwise (no markup)."""
    if value is None or value == "":
        return Text(NONE, style="dim")
    return Text(str(value), style=style)


def format_duration(seconds: float | timedelta | None) -> str:
    """A short duration: ``850ms``, ``1.2s``, ``3m04s``, ``2h05m``, ``3d04h``."""
    if seconds is None:
        return NONE
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def elapsed(
    start: datetime | None, end: datetime | None, now: datetime | None = None
) -> float | None:
    """Seconds from ``start`` to ``end``; to ``now`` while unfinished; None if not started."""
    if start is None:
        return None
    stop = end or now or datetime.now(UTC)
    return (stop - start).total_seconds()


def format_time(value: datetime | None, *, seconds: bool = True) -> str:
    """A timestamp in the local time zone, ``2024-05-01 14:03:07``."""
    if value is None:
        return NONE
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def format_time_short(value: datetime | None, now: datetime | None = None) -> str:
    """A compact local timestamp: ``14:03:07`` today, ``05-01 14:03`` this year, else the date."""
    if value is None:
        return NONE
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    local = value.astimezone()
    today = (now or datetime.now(UTC)).astimezone()
    if local.date() == today.date():
        return local.strftime("%H:%M:%S")
    if local.year == today.year:
        return local.strftime("%m-%d %H:%M")
    return local.strftime("%Y-%m-%d")


def format_time_precise(value: datetime | None) -> str:
    """A local timestamp with milliseconds, for history where events are close together."""
    if value is None:
        return NONE
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    local = value.astimezone()
    return local.strftime("%Y-%m-%d %H:%M:%S.") + f"{local.microsecond // 1000:03d}"


def to_jsonable(value: Any) -> Any:
    """Dataclasses, enums, datetimes and containers as plain JSON values (ISO datetimes)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text (see ``to_jsonable``)."""
    return json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False, default=str)


def echo_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout, and nothing else."""
    click.echo(dumps(value))


def compact(value: Any, limit: int = 80) -> str:
    """``value`` as one line of JSON, cut to ``limit`` characters."""
    if value is None:
        return NONE
    line = dumps(value, indent=None)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_summary(error: Mapping[str, Any] | None, limit: int = 80) -> str:
    """``Type: message`` of a recorded error, on one line, cut to ``limit`` characters."""
    if not error:
        return ""
    if "type" not in error and "reason" in error:
        return str(error["reason"])  # a skipped step says why
    kind = str(error.get("type", "Error")).rsplit(".", 1)[-1]
    message = " ".join(str(error.get("message", "")).split())
    line = f"{kind}: {message}" if message else kind
    return line if len(line) <= limit else line[: limit - 1] + "…"


def counts_text(counts: Mapping[str, int]) -> Text:
    """Run counts by status, coloured, in lifecycle order: ``3 completed, 1 failed``."""
    out = Text()
    keys = [s for s in STATUS_ORDER if counts.get(s)] + sorted(
        k for k in counts if k not in STATUS_ORDER and counts[k]
    )
    for index, key in enumerate(keys):
        if index:
            out.append(", ")
        out.append(f"{counts[key]} {key}", style=STATUS_STYLES.get(key, ""))
    return out if keys else Text("no runs", style="dim")


def listing(
    found: Sequence[Any], as_json: bool, empty: str, make_table: Callable[[Any], Table]
) -> Console | None:
    """Print a list command's answer: JSON, the ``empty`` message, or its table.

    Returns the console when a table was printed, for lines to follow it.
    """
    if as_json:
        echo_json(found)
        return None
    out = console()
    if not found:
        out.print(empty, style="dim")
        return None
    out.print(fit(make_table(found), out.width))
    return out


def table(*columns: str, title: str | None = None) -> Table:
    """A table with perdure's look: bold headers, no outer box, one line per row."""
    result = Table(title=title, header_style="bold", box=None, pad_edge=False, title_justify="left")
    for name in columns:
        result.add_column(name)
    return result


def key_values(rows: Iterable[tuple[str, Text | str]]) -> Table:
    """A two-column grid of ``label  value`` lines, for a record's header."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, value if isinstance(value, Text) else text(value))
    return grid


def safe_url(url: str) -> str:
    """``url`` (a URL or a ``key=value`` conninfo) with any password replaced by ``***``."""
    hidden = _PASSWORD.sub(r"\1***", url)
    try:
        parts = urlsplit(hidden)
    except ValueError:
        return hidden
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if parts.scheme not in ("postgres", "postgresql") or not at or ":" not in userinfo:
        return hidden
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))


#: How many lines of a run's input or output ``runs show`` prints without --full.
SHOWN_LINES = 12


def abbreviated(value: Any, full: bool = False, lines: int = SHOWN_LINES) -> str:
    """``value`` as indented JSON; past ``lines`` lines, its first lines and what was left out.

    The last line says how big the value is (``… 50 items``) and that
    ``--full`` shows it all. With ``full``, the whole JSON.
    """
    text = dumps(value)
    all_lines = text.splitlines()
    if full or len(all_lines) <= lines:
        return text
    shown = all_lines[: lines - 1]
    return "\n".join([*shown, f"… {size(value)}, --full to see all"])


def size(value: Any) -> str:
    """How big a JSON value is, in words: ``50 items``, ``3 keys (items: 50 items)``."""
    if isinstance(value, list | tuple):
        return f"{len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, Mapping):
        described = f"{len(value)} key{'s' if len(value) != 1 else ''}"
        biggest = max(
            ((k, v) for k, v in value.items() if isinstance(v, list | tuple | Mapping)),
            key=lambda kv: len(kv[1]),
            default=None,
        )
        if biggest is not None:
            described += f" ({biggest[0]}: {size(biggest[1])})"
        return described
    return f"{len(dumps(value))} characters"


#: The narrowest a cut column gets: enough for a few letters and "…".
MIN_CUT = 6


def fit(table: Table, width: int | None = None) -> Table:
    """Make every cell of ``table`` one line that fits ``width`` columns (the console's).

    Columns added with ``no_wrap=True`` (ids, statuses, times, numbers) keep
    their width. The others (names, errors, details) share what is left, each
    cut with "…" rather than wrapped letter by letter; each gets at least
    ``MIN_CUT`` columns.
    """
    width = width or console().width
    columns = table.columns
    if not columns:
        return table
    content = [
        max(
            [
                max((len(line) for line in _plain(cell).split("\n")), default=0)
                for cell in column.cells
            ]
            or [0]
        )
        for column in columns
    ]
    natural = [max(len(str(c.header)), w) for c, w in zip(columns, content, strict=True)]
    flexible = [i for i, column in enumerate(columns) if not column.no_wrap]
    for column in columns:
        column.no_wrap = True
        column.overflow = "ellipsis"
    padding = 2 * (len(columns) - 1)
    if sum(natural) + padding <= width:
        return table
    # Names want a dozen columns: a fixed column wider than its values (a long
    # header over short numbers) gives some back, its header cut with "…".
    wanted = sum(min(natural[i], 12) for i in flexible)
    short = wanted - (width - padding - sum(w for i, w in enumerate(natural) if i not in flexible))
    for i in range(len(columns)):
        if short <= 0:
            break
        if i not in flexible and natural[i] > max(content[i], 5):
            give = min(natural[i] - max(content[i], 5), short)
            natural[i] -= give
            short -= give
    fixed = sum(w for i, w in enumerate(natural) if i not in flexible)
    for i, column in enumerate(columns):
        if i not in flexible:
            column.min_width = column.max_width = natural[i]
    spare = max(width - fixed - padding, 0)
    left = len(flexible)
    for i in sorted(flexible, key=lambda i: natural[i]):
        share = max(min(natural[i], spare // left), MIN_CUT)
        columns[i].width = share
        spare -= share
        left -= 1
    return table


def _plain(cell: object) -> str:
    """A cell's text without styles."""
    return cell.plain if isinstance(cell, Text) else str(cell)
