"""Reports how the documentation's code blocks were run (see test_code_blocks.py)."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the count of code blocks run, checked and marked not-run."""
    module = sys.modules.get("documentation.test_code_blocks") or sys.modules.get(
        "test_code_blocks"
    )
    if module is None or not module.COUNTS:
        return
    terminalreporter.section("documentation code blocks")
    for line in module.pytest_terminal_summary_lines():
        terminalreporter.write_line(line)
