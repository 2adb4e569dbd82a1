"""Fixtures of the documentation's tests; how their code blocks were run (test_code_blocks.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from . import venvs


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., venvs.Venv]:
    """``venv("fastapi")``: a fresh environment with ``perdure[fastapi]``, one per extra."""
    made: dict[tuple[str, ...], venvs.Venv] = {}
    base: list[Path] = []

    def get(extra: str, *also: str) -> venvs.Venv:
        if not base:
            base.append(tmp_path_factory.mktemp("venvs"))
        if (extra, *also) not in made:
            made[(extra, *also)] = venvs.make(base[0], extra, *also)
        return made[(extra, *also)]

    return get


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the count of code blocks run, checked and marked not-run; the venvs' timings."""
    if venvs.TIMINGS:
        terminalreporter.section("documentation venvs")
        for extra, seconds in venvs.TIMINGS.items():
            terminalreporter.write_line(
                f"  {seconds:6.1f} s  python -m venv, pip install -e .{extra}"
            )
        total = sum(venvs.TIMINGS.values())
        terminalreporter.write_line(f"  {total:6.1f} s  in all")
    module = sys.modules.get("documentation.test_code_blocks") or sys.modules.get(
        "test_code_blocks"
    )
    if module is None or not module.COUNTS:
        return
    terminalreporter.section("documentation code blocks")
    for line in module.pytest_terminal_summary_lines():
        terminalreporter.write_line(line)
