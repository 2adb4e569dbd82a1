"""The overview's activity chart: runs started per time bucket, stacked by what they became.

Bars are computed here in the coordinates of a fixed SVG viewBox and drawn by
the template, so the chart needs no JavaScript and no chart library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from perdure.dashboard import format as fmt

WIDTH = 1000
HEIGHT = 200
TOP = 10
BASE = 170
#: Stacking order, bottom up, and which statuses each band holds.
BANDS: dict[str, tuple[str, ...]] = {
    "ok": ("completed", "continued"),
    "bad": ("failed", "compensated", "compensation_failed"),
    "muted": ("cancelled",),
    "live": ("queued", "running", "waiting", "paused", "compensating"),
}
BAND_NAMES = {"ok": "completed", "bad": "failed", "muted": "cancelled", "live": "in flight"}

#: Ranges the overview offers: (label, window, bucket).
RANGES: dict[str, tuple[timedelta, timedelta]] = {
    "15m": (timedelta(minutes=15), timedelta(seconds=15)),
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "6h": (timedelta(hours=6), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(minutes=30)),
    "7d": (timedelta(days=7), timedelta(hours=3)),
}


@dataclass(frozen=True)
class Rect:
    """One band of one bar."""

    x: float
    y: float
    width: float
    height: float
    tone: str
    title: str


@dataclass(frozen=True)
class Chart:
    """Bars, y gridlines (y, label), x labels (x, label) and the window's totals."""

    rects: list[Rect]
    grid: list[tuple[float, str]]
    labels: list[tuple[float, str]]
    totals: dict[str, int]


def window_start(now: datetime, window: timedelta, bucket: timedelta) -> datetime:
    """The start of the first bucket: ``now - window``, aligned down to a bucket."""
    start = now - window
    seconds = bucket.total_seconds()
    aligned = math.floor(start.timestamp() / seconds) * seconds
    return datetime.fromtimestamp(aligned, tz=start.tzinfo)


def build(rows: list[dict[str, Any]], since: datetime, bucket: timedelta, now: datetime) -> Chart:
    """The chart of ``rows`` (bucket, status, n from App.run_activity) from ``since`` to now."""
    count = max(math.ceil((now - since) / bucket), 1)
    stacks: list[dict[str, int]] = [dict.fromkeys(BANDS, 0) for _ in range(count)]
    band_of = {status: band for band, statuses in BANDS.items() for status in statuses}
    for row in rows:
        index = int((row["bucket"] - since) / bucket)
        if 0 <= index < count:
            stacks[index][band_of.get(row["status"], "live")] += int(row["n"])
    top = _nice(max((sum(s.values()) for s in stacks), default=0))
    slot = WIDTH / count
    gap = min(slot * 0.18, 4.0)
    rects = []
    for index, stack in enumerate(stacks):
        start = since + bucket * index
        title = _title(start, bucket, stack)
        y = float(BASE)
        for band, n in stack.items():
            if n:
                h = (BASE - TOP) * n / top
                y -= h
                rects.append(
                    Rect(
                        round(index * slot + gap / 2, 2),
                        round(y, 2),
                        round(slot - gap, 2),
                        round(h, 2),
                        band,
                        title,
                    )
                )
    grid = [(BASE - (BASE - TOP) * f, fmt.number(round(top * f))) for f in (0.0, 0.5, 1.0)]
    step = max(count // 6, 1)
    long_range = bucket * count > timedelta(days=1)
    labels = [
        (index * slot, (since + bucket * index).strftime("%a %H:%M" if long_range else "%H:%M"))
        for index in range(0, count, step)
        if count - index > step // 2  # no label squeezed against the right edge
    ]
    totals = {band: sum(s[band] for s in stacks) for band in BANDS}
    return Chart(rects, grid, labels, totals)


def _nice(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (at least 4)."""
    value = max(value, 4)
    magnitude = int(10 ** math.floor(math.log10(value)))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= value:
            return factor * magnitude
    return 10 * magnitude


def _title(start: datetime, bucket: timedelta, stack: dict[str, int]) -> str:
    parts = [f"{n} {BAND_NAMES[band]}" for band, n in stack.items() if n]
    what = ", ".join(parts) if parts else "no runs"
    return f"{start:%H:%M:%S} to {start + bucket:%H:%M:%S} UTC: {what}"
