"""Times and durations on the command line: ``30m``, ``2h``, ``7d``, ``2w`` or ISO timestamps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

DURATION_HELP = "a duration such as 30m, 2h, 7d or 2w"
POINT_HELP = f"{DURATION_HELP} (ago) or an ISO timestamp such as 2024-05-01T12:00:00+02:00"


def parse_duration(value: str) -> timedelta:
    """A duration from ``90s``, ``30m``, ``2h``, ``7d`` or ``2w``; ValueError otherwise."""
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"not a duration: {value!r}")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()])


def parse_point(value: str, now: datetime | None = None) -> datetime:
    """A point in time from a duration (that long ago) or an ISO timestamp (naive is UTC)."""
    try:
        return (now or datetime.now(UTC)) - parse_duration(value)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(value.strip())
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def point_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A click callback: parse with ``parse_point``, or fail saying what is accepted."""
    if value is None:
        return None
    try:
        return parse_point(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither {POINT_HELP}", ctx, param) from None


def duration_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A click callback: parse with ``parse_duration``, or fail saying what is accepted."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not {DURATION_HELP}", ctx, param) from None


def age_or_point_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A click callback: a timedelta for a duration (an age), a datetime for an ISO time."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return point_option(ctx, param, value)
