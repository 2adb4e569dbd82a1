"""The coverage floors of perdure, its engine and its store, enforced at the end of a run.

pytest-cov measures the whole package; this prints, for perdure as a whole and
for the engine and the store, the share of lines, of branches and of both
together, and holds each package's floored figure to its floor when the run is
the whole suite (a run of some tests only prints them). perdure as a whole is
held on lines and branches together, the engine and the store on their
branches alone: every way out of an ``if``, a loop or an ``except`` of theirs
is taken by some test. The hooks are wired in ``tests/conftest.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

#: The package's sources in this tree.
SOURCE = str(Path(__file__).resolve().parents[1] / "src")

#: Which figure is held to a floor: the branches alone, or lines and branches
#: together (as coverage.py counts them with ``branch = true``).
Kind = Literal["branches", "lines and branches"]

#: Each floored package: the figure held and its floor, in percent. What is
#: left untaken in the engine is mostly a lost lease or a cancellation landing
#: between two statements of one execution.
FLOORS: dict[str, tuple[Kind, float]] = {
    "perdure": ("lines and branches", 85.0),
    "perdure/engine": ("branches", 90.0),
    "perdure/store": ("branches", 90.0),
}


@dataclass(frozen=True)
class Figure:
    """One package's coverage, in percent: lines, branches, both, and its floor."""

    package: str
    lines: float
    branches: float
    combined: float
    kind: Kind
    floor: float

    @property
    def held(self) -> float:
        """The figure the floor applies to."""
        return self.branches if self.kind == "branches" else self.combined

    @property
    def holds(self) -> bool:
        """Whether the package is at or above its floor."""
        return self.held >= self.floor

    def summary(self) -> str:
        """One line for the terminal: every figure, the floor and what it applies to."""
        return (
            f"coverage of {self.package}: lines {self.lines:.1f}%, branches "
            f"{self.branches:.1f}%, lines and branches {self.combined:.1f}%; "
            f"floor {self.floor:.0f}% on {self.kind}"
        )


def _coverage(session: pytest.Session) -> Any | None:
    """The combined coverage.py object of this run, or None without --cov."""
    plugin = session.config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    if controller is None or getattr(plugin, "_disabled", False):
        return None
    return getattr(controller, "cov", None)


def whole_suite(session: pytest.Session) -> bool:
    """Whether this run is the whole suite (no paths given but the testpaths, no -k or -m)."""
    config = session.config
    given = sorted(str(arg) for arg in config.args)
    return (
        given == sorted(config.getini("testpaths"))
        and not config.option.keyword
        and not config.option.markexpr
    )


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 100.0


def measure(session: pytest.Session) -> list[Figure]:
    """Each floored package's coverage in this run (empty when coverage is off)."""
    cov = _coverage(session)
    if cov is None:
        return []
    figures = []
    for package, (kind, floor) in FLOORS.items():
        statements = executed = branches = taken = 0
        # This tree's files, a file no test imported included (as 0%); not a
        # copy of another release that a test ran.
        for path in sorted(Path(SOURCE, package).rglob("*.py")):
            # coverage.py's per-file analysis, as its reports count (the public
            # API gives the lines of a file, not its branches).
            numbers = cov._analyze(str(path)).numbers
            statements += numbers.n_statements
            executed += numbers.n_executed
            branches += numbers.n_branches
            taken += numbers.n_executed_branches
        figures.append(
            Figure(
                package,
                lines=_percent(executed, statements),
                branches=_percent(taken, branches),
                combined=_percent(executed + taken, statements + branches),
                kind=kind,
                floor=floor,
            )
        )
    return figures
