"""Writes travel as records, not as statements taken apart again.

Checkpoints, completions, starts and releases are records of data
(``perdure.store.writes``); only the store's statement modules turn them into
SQL parameters. Nothing else reads a statement's parameters or tells
statements apart by their query's name, and each of these writes has one SQL
form: no named query is its twin for many (a ``_many`` or ``_step_many``).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perdure.store.rows import Fence
from perdure.store.writes import Checkpoint, Completion, Release, Start

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "perdure"
QUERIES = PACKAGE / "store" / "sql" / "queries"
#: The modules that build statements from records: the only ones that may
#: read a statement's parameters or its name.
STATEMENT_MODULES = {PACKAGE / "store" / "statement.py", PACKAGE / "store" / "store.py"}
STATEMENT_PACKAGE = PACKAGE / "store" / "statements"


def query_names() -> set[str]:
    """Every named query of the store."""
    names: set[str] = set()
    for path in QUERIES.glob("*.sql"):
        names.update(re.findall(r"^-- name: ([a-z0-9_]+)", path.read_text(), re.MULTILINE))
    return names


def breaches(tree: ast.AST, names: set[str]) -> list[str]:
    """Reads of a statement's parameters, and comparisons with a query's name, in ``tree``."""
    found: list[str] = []
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        # `.params` as a value (stmt.params, stmt.params["x"]); a method call
        # such as fence.params() or RunFilter.params() builds parameters instead.
        if isinstance(node, ast.Attribute) and node.attr == "params" and id(node) not in called:
            found.append(f"line {node.lineno}: reads .params")
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Constant) and side.value in names:
                    found.append(f"line {node.lineno}: compares with query name {side.value!r}")
                if isinstance(side, ast.Attribute) and side.attr == "name":
                    others = [node.left, *node.comparators]
                    if any(isinstance(o, ast.Constant) and o.value in names for o in others):
                        found.append(f"line {node.lineno}: tells a statement by its name")
    return found


def outside_the_statement_modules() -> list[Path]:
    """The modules of perdure that may not look into statements."""
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in STATEMENT_MODULES and STATEMENT_PACKAGE not in path.parents
    ]


def test_no_module_outside_the_store_statements_reads_a_statement() -> None:
    names = query_names()
    assert "step_checkpoint" in names and "run_insert" in names
    found = {
        str(path.relative_to(PACKAGE)): hits
        for path in outside_the_statement_modules()
        if (hits := breaches(ast.parse(path.read_text()), names))
    }
    assert found == {}


def test_the_scan_catches_what_it_forbids() -> None:
    """The scan is not blind: each forbidden form in a sample is reported."""
    sample = ast.parse(
        "if stmt.name == 'run_insert' and stmt.params['run_id']:\n"
        "    ids = [s.params.get('key') for s in starts]\n"
        "fence.params()\n"
    )
    hits = breaches(sample, {"run_insert"})
    assert sum("reads .params" in hit for hit in hits) == 2
    assert any("by its name" in hit for hit in hits)


def test_every_write_has_one_sql_form() -> None:
    names = query_names()
    writes = {"step_checkpoint", "run_complete", "run_insert", "task_release"}
    assert writes <= names
    twins = sorted(name for name in names if any(name.startswith(w + "_") for w in writes))
    assert twins == []
    assert not (PACKAGE / "store" / "batch_statements.py").exists()


@pytest.mark.parametrize("record", [Checkpoint, Completion, Release, Start])
def test_writes_are_frozen_records_with_slots(record: type) -> None:
    assert dataclasses.is_dataclass(record)
    assert record.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" in record.__dict__


def test_a_checkpoint_knows_its_history_event_and_refuses_changes() -> None:
    fence = Fence(1, "w", 1)
    checkpoint = Checkpoint(fence, 0, "a", "step", "retrying", 2, datetime.now(UTC))
    assert checkpoint.event == "step_retry_scheduled"
    with pytest.raises(dataclasses.FrozenInstanceError):
        checkpoint.status = "completed"  # type: ignore[misc]


def test_starts_of_different_shapes_are_not_one_statement() -> None:
    from perdure.clock import Clock
    from perdure.store.statements import Statements

    statements = Statements("perdure", Clock())
    one = Start("00000000-0000-0000-0000-000000000001", "w", 1, "default", None, "1")
    same = dataclasses.replace(one, run_id="00000000-0000-0000-0000-000000000002", key="k")
    other = dataclasses.replace(one, priority=5)
    assert one.shape == same.shape != other.shape
    statements.runs.insert([one, same])
    with pytest.raises(ValueError, match="share their shape"):
        statements.runs.insert([one, other])
