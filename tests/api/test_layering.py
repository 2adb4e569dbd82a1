"""The API reaches psycopg only through perdure.store, and never imports perdure.testing."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "src" / "perdure" / "api"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_api_imports_neither_psycopg_nor_the_testing_helpers() -> None:
    for path in sorted(API.glob("*.py")):
        bad = {
            m
            for m in _imports(path)
            if m.split(".")[0] == "psycopg" or m.startswith("perdure.testing")
        }
        assert not bad, f"api/{path.name} imports {sorted(bad)}"


def test_no_api_module_names_the_app_class_it_serves() -> None:
    for path in sorted(API.glob("*.py")):
        if path.name != "app.py":
            assert "perdure.api.app" not in _imports(path), f"api/{path.name} imports the App"
