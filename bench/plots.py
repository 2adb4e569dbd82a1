"""Pictures of a `perdure bench` report (its JSON), drawn with matplotlib.

Usage: python bench/plots.py bench.json DIR   (or: perdure bench --plot DIR --from bench.json)

Each picture is drawn only from rows the report has, so a picture never says
more than the table: throughput against concurrency (the --sweep rows; else
each system at the one concurrency measured), latency percentiles, map width
against steps/s (rows ``map.w<N>.steps_per_s``), and throughput as finished
runs accumulate (empty tables, then --preload finished runs).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

SYSTEMS = {"perdure": "perdure", "dbos": "DBOS", "pgqrs": "pgqrs", "absurd": "Absurd"}
COLOURS = {"perdure": "#2f6fb3", "dbos": "#c4573a", "pgqrs": "#4c9a5b", "absurd": "#8a63b0"}
SWEEP = re.compile(r"^sweep\.(?P<system>\w+)\.c(?P<level>\d+)\.runs_per_s$")
MAP = re.compile(r"^map\.w(?P<width>\d+)\.steps_per_s$")


def medians(report: dict[str, Any]) -> dict[str, float]:
    """Each measured row's median, by key."""
    return {r["key"]: r["median"] for r in report["rows"] if r["median"] is not None}


def plot(report: dict[str, Any], folder: Path, source: str = "") -> list[Path]:
    """Draw every picture the report has the rows for into ``folder``; the files written.

    ``source`` (the JSON file and its sha256) is written into each PNG's
    metadata, so a test can tell which report a committed picture shows.
    """
    import matplotlib

    matplotlib.use("Agg")
    folder.mkdir(parents=True, exist_ok=True)
    found = medians(report)
    caption = _caption(report)
    written = []
    for name, draw in (
        ("bench-throughput.png", _throughput),
        ("bench-latency.png", _latency),
        ("bench-map-width.png", _map_width),
        ("bench-history.png", _history),
    ):
        figure = draw(found, report)
        if figure is None:
            continue
        figure.text(0.99, 0.01, caption, ha="right", va="bottom", fontsize=7, color="#666")
        figure.tight_layout(rect=(0, 0.04, 1, 1))
        path = folder / name
        # No timestamp in the file: the same report draws the same bytes.
        figure.savefig(path, dpi=110, metadata={"Software": None, "Source": source or None})
        written.append(path)
        import matplotlib.pyplot as plt

        plt.close(figure)
    return written


def _caption(report: dict[str, Any]) -> str:
    machine = report["machine"]
    load = machine.get("load_average")
    busy = f", load {load[0]:.1f}" if load else ""
    return (
        f"perdure bench, {report['when']}, {machine['cores']} cores{busy}; "
        f"medians of {report['options']['repeat']} repetitions"
    )


def _figure(title: str) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.8))
    axes.set_title(title, fontsize=11)
    axes.grid(axis="y", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def _throughput(found: dict[str, float], report: dict[str, Any]) -> Any:
    curves: dict[str, dict[int, float]] = {}
    for key, value in found.items():
        match = SWEEP.match(key)
        if match:
            curves.setdefault(match["system"], {})[int(match["level"])] = value
    if curves:
        figure, axes = _figure("3-step runs per second against runs in flight")
        for system, points in sorted(curves.items()):
            levels = sorted(points)
            axes.plot(
                levels,
                [points[x] for x in levels],
                marker="o",
                label=SYSTEMS.get(system, system),
                color=COLOURS.get(system),
            )
        axes.set_xscale("log", base=2)
        axes.set_xticks(sorted({x for p in curves.values() for x in p}))
        axes.get_xaxis().set_major_formatter("{x:.0f}")
        axes.set_xlabel("runs in flight (--concurrency)")
        axes.set_yscale("log")
        axes.set_ylabel("runs/s (log scale)")
        axes.legend(frameon=False)
        return figure
    systems = [s for s in SYSTEMS if f"{s}.runs_per_s" in found]
    if not systems:
        return None
    level = report["options"]["concurrency"]
    figure, axes = _figure(f"3-step runs per second, {level} runs in flight, one server")
    values = [found[f"{s}.runs_per_s"] for s in systems]
    bars = axes.barh(
        [SYSTEMS[s] for s in systems], values, color=[COLOURS[s] for s in systems], height=0.6
    )
    axes.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=9)
    axes.invert_yaxis()
    axes.set_xlabel("runs/s")
    axes.grid(axis="x", alpha=0.3)
    axes.grid(axis="y", visible=False)
    axes.set_xlim(0, max(values) * 1.15)
    return figure


def _latency(found: dict[str, float], report: dict[str, Any]) -> Any:
    kinds = [
        ("start → first step", "latency.start"),
        ("signal → continue", "latency.signal"),
        ("step, under load", "perdure.step"),
    ]
    present = [(label, key) for label, key in kinds if f"{key}_p50_ms" in found]
    if not present:
        return None
    figure, axes = _figure("perdure latency percentiles")
    width = 0.38
    for offset, (percentile, colour) in enumerate((("p50", "#2f6fb3"), ("p99", "#9bbce0"))):
        xs = [i + (offset - 0.5) * width for i in range(len(present))]
        values = [found.get(f"{key}_{percentile}_ms", 0.0) for _, key in present]
        bars = axes.bar(xs, values, width, label=percentile, color=colour)
        axes.bar_label(bars, labels=[f"{v:.1f}" for v in values], padding=2, fontsize=8)
    axes.set_xticks(range(len(present)), [label for label, _ in present])
    axes.set_ylabel("milliseconds")
    axes.legend(frameon=False)
    return figure


def _map_width(found: dict[str, float], report: dict[str, Any]) -> Any:
    points = {int(m["width"]): v for k, v in found.items() if (m := MAP.match(k))}
    if not points:
        return None
    widths = sorted(points)
    figure, axes = _figure("ctx.map: steps per second against the map's width")
    axes.plot(widths, [points[w] for w in widths], marker="o", color=COLOURS["perdure"])
    # The same steps one after another in one run, where the report has the ratio.
    chained = {w: points[w] / r for w in widths if (r := found.get(f"map.w{w}.ratio"))}
    if chained:
        sequence = sorted(chained)
        axes.plot(
            sequence,
            [chained[w] for w in sequence],
            marker="s",
            linestyle="--",
            color="#888",
            label="the same steps in sequence",
        )
        axes.lines[0].set_label("ctx.map")
        axes.legend(frameon=False)
    axes.set_xscale("log")
    axes.set_ylim(bottom=0)
    axes.set_xlabel("steps in one ctx.map (or in one sequence)")
    axes.set_ylabel("steps/s")
    return figure


def _history(found: dict[str, float], report: dict[str, Any]) -> Any:
    if "perdure.runs_per_s" not in found or "preloaded.runs_per_s" not in found:
        return None
    finished = [0, int(report["options"]["preload"])]
    rates = [found["perdure.runs_per_s"], found["preloaded.runs_per_s"]]
    figure, axes = _figure("perdure runs/s as finished runs accumulate")
    bars = axes.bar([f"{n:,} finished runs" for n in finished], rates, 0.5, color="#2f6fb3")
    axes.bar_label(bars, labels=[f"{v:,.0f} runs/s" for v in rates], padding=2, fontsize=9)
    axes.set_ylabel("runs/s")
    axes.set_ylim(0, max(rates) * 1.2)
    return figure


def source_of(path: Path) -> str:
    """How a picture names the report it was drawn from: the file's name and sha256."""
    return f"{path.name} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


if __name__ == "__main__":
    report_path = Path(sys.argv[1])
    for written in plot(
        json.loads(report_path.read_text()), Path(sys.argv[2]), source_of(report_path)
    ):
        print(written)
