"""Print a `perdure bench --json` report as a Markdown table (for the README and docs).

Usage: python bench/markdown.py bench.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from suite import number


def table(report: dict[str, Any]) -> str:
    """The report's rows as a Markdown table: figure, median, unit, repetitions, goal."""
    machine = report["machine"]
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    lines = [
        f"`perdure bench` on {report['when']}, {machine['cores']} cores, load average {load}, "
        f"medians of {report['options']['repeat']} repetitions "
        f"({report['options']['runs']} runs, concurrency {report['options']['concurrency']}):",
        "",
        "| figure | median | unit | repetitions | goal |",
        "|---|---:|---|---|---|",
    ]
    for row in report["rows"]:
        values = ", ".join(number(v) for v in row["values"]) if len(row["values"]) > 1 else ""
        median = number(row["median"]) if row["median"] is not None else row["note"] or "n/a"
        goal = row["goal"]
        if row["met"] is not None:
            goal += " met" if row["met"] else " **missed**"
        lines.append(f"| {row['label']} | {median} | {row['unit']} | {values} | {goal} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as source:
        print(table(json.load(source)))
