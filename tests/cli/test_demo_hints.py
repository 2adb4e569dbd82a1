"""The demo's closing hints work as printed right after the README's quickstart."""

from __future__ import annotations

import pytest

from perdure.cli.demo import invoked_as


def test_the_demo_hints_name_the_program_as_it_was_run() -> None:
    # Right after the README's quickstart no `perdure` is on PATH: the path typed is kept.
    assert invoked_as(".venv/bin/perdure") == [".venv/bin/perdure"]
    assert invoked_as("/somewhere/perdure/__main__.py")[1:] == ["-m", "perdure"]
    assert invoked_as("pytest") == ["perdure"]


def test_the_demo_hints_work_as_printed_after_the_quickstart_and_say_how_to_stop_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collections import Counter

    from rich.console import Console

    from perdure.cli.demo import _hints
    from perdure.cli.state import CliState
    from perdure.demo.runner import Summary

    monkeypatch.setattr("sys.argv", [".venv/bin/perdure", "demo"])
    monkeypatch.setenv("PATH", "/nonexistent")  # no `perdure` on PATH, as after the quickstart
    summary = Summary(10, Counter(completed=10), 30, 0, None, [], 0, 0, [], 5, 0, 5, 0, 1.0)
    console = Console(record=True, width=200)
    _hints(console, CliState(None, None), "postgresql://postgres@/postgres", "demo", summary)
    text = console.export_text()
    assert ".venv/bin/perdure --schema demo runs list" in text
    assert ".venv/bin/perdure demo --serve" in text
    assert "keeps running after the demo; stop it with: .venv/bin/perdure embedded stop" in text
    # With a database of the user's, there is no embedded server to stop.
    console = Console(record=True, width=200)
    _hints(console, CliState("dbname=x", None), "dbname=x", "demo", summary)
    assert "embedded stop" not in console.export_text()
