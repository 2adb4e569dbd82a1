"""Fixtures of the documentation's tests; how their code blocks were run (test_code_blocks.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from . import venvs

#: The environments the collected tests will make (see venvs.NEEDS).
WANTED: list[tuple[str, ...]] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Note which environments the selected tests need, to make them all at once."""
    for name in sorted({item.path.name for item in items}):
        for spec in venvs.NEEDS.get(name, []):
            if spec not in WANTED:
                WANTED.append(spec)


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., venvs.Venv]]:
    """``venv("fastapi")``: a fresh environment with ``perdure[fastapi]``, one per extra.

    The first call starts making every environment the session needs, in
    parallel; each call waits for its own.
    """
    made: dict[tuple[str, ...], Future[venvs.Venv]] = {}
    base: list[Path] = []
    pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1), thread_name_prefix="venv")

    def get(extra: str, *also: str) -> venvs.Venv:
        if not base:
            base.append(tmp_path_factory.mktemp("venvs"))
        for spec in [*WANTED, (extra, *also)]:
            if spec not in made:
                made[spec] = pool.submit(venvs.make, base[0], *spec)
        return made[(extra, *also)].result()

    yield get
    pool.shutdown(wait=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the count of code blocks run, checked and marked not-run; the venvs' timings."""
    if venvs.TIMINGS:
        terminalreporter.section("documentation venvs (made in parallel)")
        for extra, seconds in venvs.TIMINGS.items():
            line = f"  {seconds:6.1f} s  python -m venv, pip install -e .{extra}"
            terminalreporter.write_line(line)
        wall = max(end for _, end in venvs.SPANS) - min(start for start, _ in venvs.SPANS)
        terminalreporter.write_line(f"  {wall:6.1f} s  from the first begun to the last done")
    module = sys.modules.get("documentation.test_code_blocks") or sys.modules.get(
        "test_code_blocks"
    )
    if module is None or not module.COUNTS:
        return
    terminalreporter.section("documentation code blocks")
    for line in module.pytest_terminal_summary_lines():
        terminalreporter.write_line(line)
