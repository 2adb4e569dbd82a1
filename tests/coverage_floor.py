"""The coverage floors of the engine and the store, enforced at the end of a run.

pytest-cov measures the whole package; this prints the figure of perdure as a
whole and of the engine and the store, and holds each to its floor when the
run is the whole suite (a run of some tests only prints them). The hooks are
wired in ``tests/conftest.py``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The package's sources in this tree.
SOURCE = str(Path(__file__).resolve().parents[1] / "src")

#: Coverage (lines and branches together, as coverage.py counts with
#: ``branch = true``) each package must keep, in percent.
FLOORS = {"perdure": 85.0, "perdure/engine": 90.0, "perdure/store": 90.0}


@dataclass(frozen=True)
class Figure:
    """One package's coverage: the combined percentage and the branch share alone."""

    package: str
    percent: float
    branches: float
    floor: float

    @property
    def holds(self) -> bool:
        """Whether the package is at or above its floor."""
        return self.percent >= self.floor


def _coverage(session: pytest.Session) -> object | None:
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


def measure(session: pytest.Session) -> list[Figure]:
    """Each floored package's coverage in this run (empty when coverage is off)."""
    cov = _coverage(session)
    if cov is None:
        return []
    figures = []
    for package, floor in FLOORS.items():
        pattern = f"{SOURCE}/{package}/*"
        percent = cov.report(include=[pattern], file=io.StringIO())  # type: ignore[attr-defined]
        taken = total = 0
        data = cov.get_data()  # type: ignore[attr-defined]
        for path in data.measured_files():
            # This tree's files only: not a copy of another release a test ran.
            if f"/{package}/" not in path or not path.startswith(SOURCE):
                continue
            numbers = cov._analyze(path).numbers  # type: ignore[attr-defined]
            total += numbers.n_branches
            taken += numbers.n_branches - numbers.n_missing_branches
        branches = 100.0 * taken / total if total else 100.0
        figures.append(Figure(package, percent, branches, floor))
    return figures
