"""The dependency rule of docs/architecture.md: api → engine → store, SQL only in store."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "perdure"

FORBIDDEN = {
    "store": {
        "perdure.api",
        "perdure.engine",
        "perdure.cli",
        "perdure.dashboard",
        "perdure.observability",
    },
    "engine": {"perdure.api", "perdure.cli", "perdure.dashboard", "perdure.observability"},
    "observability": {"perdure.api", "perdure.cli", "perdure.dashboard"},
    "api": {"perdure.cli", "perdure.dashboard"},
    # The dashboard sits beside the CLI: it reads and acts through perdure.api only.
    "dashboard": {"perdure.engine", "perdure.store", "perdure.cli", "psycopg"},
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


def _built_from_strings(node: ast.AST) -> bool:
    """An f-string, a ``%`` or ``+`` on strings, or ``"...".format(...)``."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
        return any(
            isinstance(side, ast.Constant | ast.JoinedStr) for side in (node.left, node.right)
        )
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
    )


def test_no_statement_is_built_by_pasting_strings() -> None:
    """Every ``execute(...)`` and ``sql.SQL(...)`` gets a literal or a composed query.

    Values travel as parameters and identifiers through ``sql.Identifier``;
    the one rendered template, the named queries, is filled with the quoted
    schema by the store when it loads them.
    """
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in {"execute", "executemany", "SQL"} and _built_from_strings(node.args[0]):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
