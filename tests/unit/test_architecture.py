"""The dependency rule of docs/architecture.md: api → engine → store, SQL only in store."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "perdure"

FORBIDDEN = {
    "store": {"perdure.api", "perdure.engine", "perdure.cli"},
    "engine": {"perdure.api", "perdure.cli"},
    "api": {"perdure.cli"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_layers_import_only_downwards() -> None:
    for layer, forbidden in FORBIDDEN.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            bad = {m for m in _imports(path) if any(m.startswith(f) for f in forbidden)}
            assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_sql_text_appears_only_in_the_store() -> None:
    keywords = ("INSERT INTO", "DELETE FROM", "SELECT * FROM", "CREATE TABLE")
    for path in PACKAGE.rglob("*.py"):
        if "store" in path.relative_to(PACKAGE).parts or path.parts[-2] == "demo":
            continue
        text = path.read_text()
        for keyword in keywords:
            assert keyword not in text, f"{path.relative_to(PACKAGE)} contains {keyword!r}"


def test_modules_stay_small() -> None:
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= 600, f"{path.relative_to(PACKAGE)} has {lines} lines"
