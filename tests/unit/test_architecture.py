"""The layering of docs/architecture.md, in one sentence, and the store's monopoly on SQL.

A package imports only packages below it in ``__main__ → cli → dashboard ·
testing · integrations · demo → perdure (the public names) → api →
observability → engine → store → leaves`` (leaves: errors, types, clock,
ids, steps), never one above or beside it, and no two modules import each
other, not even under TYPE_CHECKING. The package root re-exports the public
API, so the packages built on it (integrations, the demo) use it as users do.

Every import counts: at module level, inside functions, and under
TYPE_CHECKING. Every package is held to the rule; :func:`violations` reports
a package's breaches.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "perdure"

#: Each package's rank: a package may import only packages of a lower rank.
RANK = {
    "__main__": 7,
    "cli": 6,
    "integrations": 5,
    "dashboard": 5,
    "testing": 5,
    "demo": 5,
    "api": 4,
    "observability": 3,
    "engine": 2,
    "store": 1,
    "errors": 0,
    "types": 0,
    "clock": 0,
    "ids": 0,
    "steps": 0,
}
#: The rank of the package root (``import perdure``): above api, which it re-exports.
ROOT_RANK = 4.5
#: The packages this test holds to the rule: every one.
STRICT = tuple(RANK)


Modules = dict[str, Path]


def scan(src: Path) -> Modules:
    """The modules of the perdure package under ``src``, by dotted name."""
    found = {}
    for path in (src / "perdure").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = scan(SRC)


def _resolve(modules: Modules, name: str) -> str | None:
    """The perdure module ``name`` names (or the one that defines it), or None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(modules: Modules, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported perdure module or external module) for every import."""
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, _resolve(modules, alias.name) or alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found = _resolve(modules, name) if base.startswith("perdure") else None
                yield node.lineno, found or base


def _package(module: str) -> str | None:
    """The package (first part under perdure) a perdure module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(package: str, modules: Modules = MODULES) -> list[str]:
    """Every import of ``package`` that goes up or sideways (the root ranks above api)."""
    found = []
    for module in sorted(m for m in modules if _package(m) == package):
        for line, imported in _imports(modules, module):
            if not imported.startswith("perdure"):
                continue
            target = _package(imported)
            if target == package:
                continue
            rank = ROOT_RANK if target is None else RANK[target]
            if rank >= RANK[package]:
                found.append(f"{module}:{line} imports {imported}")
    return found


def cycles(modules: Modules = MODULES) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop."""
    graph = {m: {i for _, i in _imports(modules, m) if i in modules and i != m} for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_every_package_has_a_rank() -> None:
    packages = {_package(m) for m in MODULES} - {None}
    assert packages <= set(RANK), f"packages without a layer: {packages - set(RANK)}"


@pytest.mark.parametrize("package", STRICT)
def test_a_package_imports_only_packages_below_it(package: str) -> None:
    assert violations(package) == []


def test_no_module_of_the_lower_layers_is_in_an_import_cycle() -> None:
    tangled = [g for g in cycles() if any(_package(m) in STRICT for m in g)]
    assert tangled == []


def test_the_checks_find_an_upward_import_a_sideways_one_and_a_typing_cycle(
    tmp_path: Path,
) -> None:
    files = {
        "__init__.py": "",
        "errors.py": "",
        "types.py": "from perdure import errors\n",
        "store/__init__.py": "",
        "store/a.py": "from perdure.engine import b\nfrom perdure.errors import X\n",
        "engine/__init__.py": "",
        "engine/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from perdure.engine.c import C\n",
        "engine/c.py": "from perdure.engine import b\nfrom perdure.store import a\n",
    }
    for name, text in files.items():
        (tmp_path / "perdure" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "perdure" / name).write_text(text)
    modules = scan(tmp_path)
    assert violations("store", modules) == ["perdure.store.a:1 imports perdure.engine.b"]
    assert violations("types", modules) == ["perdure.types:1 imports perdure.errors"]
    assert violations("engine", modules) == []
    assert cycles(modules) == [["perdure.engine.b", "perdure.engine.c", "perdure.store.a"]]


#: The packages under the public API; above it, the CLI, the demo, the test
#: plugin and the integrations may talk to the database as a user's code does.
INNER = [p for p in RANK if RANK[p] <= RANK["api"] and p != "store"]


@pytest.mark.parametrize("package", INNER)
def test_psycopg_is_imported_only_by_the_store(package: str) -> None:
    found = [
        f"{m}:{line}"
        for m in MODULES
        if _package(m) == package
        for line, imported in _imports(MODULES, m)
        if imported.split(".")[0] in ("psycopg", "psycopg_pool")
    ]
    assert found == []


#: A name in a statement: a table, a schema-qualified one, a placeholder.
_NAME = r"[\w.\"{}%()]+"
#: A string that is an SQL statement: a leading keyword, then the structure
#: that keyword takes (so prose such as "Select the runs" or "drop it" is not).
SQL_STATEMENT = re.compile(
    r"""^\s*(?:
      SELECT\s+(?:DISTINCT\s+)?(?:[\w"().,*:\s%]+?\s+FROM\s+\S|[\w.]+\s*\(|\*
        |(?:\d+|%s|%\(\w+\)s|true|false|null)\b)
    | INSERT\s+INTO\s+NAME
    | UPDATE\s+NAME\s+SET\s
    | DELETE\s+FROM\s+NAME
    | CREATE\s+(?:OR\s+REPLACE\s+|UNIQUE\s+|TEMP(?:ORARY)?\s+|UNLOGGED\s+)*
        (?:TABLE|INDEX|SCHEMA|VIEW|FUNCTION|PROCEDURE|TRIGGER|ROLE|USER|EXTENSION
          |SEQUENCE|TYPE|DATABASE|PUBLICATION|POLICY)\b
    | ALTER\s+(?:TABLE|INDEX|SCHEMA|VIEW|FUNCTION|ROLE|USER|DATABASE|SEQUENCE|TYPE|SYSTEM
          |DEFAULT\s+PRIVILEGES)\b
    | DROP\s+(?:TABLE|INDEX|SCHEMA|VIEW|FUNCTION|PROCEDURE|TRIGGER|ROLE|USER|EXTENSION
          |SEQUENCE|TYPE|DATABASE|PUBLICATION|POLICY|OWNED)\b
    | WITH\s+(?:RECURSIVE\s+)?\w+(?:\s*\([^)]*\))?\s+AS\s+(?:(?:NOT\s+)?MATERIALIZED\s+)?\(
    | (?:GRANT|REVOKE)\s+[\w\s,()]+?\s+(?:ON|TO|FROM)\s+\S
    | TRUNCATE\s+(?:TABLE\s+)?(?:ONLY\s+)?NAME
    | COPY\s+\S+.*?\b(?:FROM|TO)\s+\S
    )""".replace("NAME", _NAME),
    re.VERBOSE | re.DOTALL | re.IGNORECASE,
)


def _string_constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant; an f-string's holes read as ``x``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            parts = (v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
            yield node.lineno, "".join(str(part) for part in parts)


def sql_statements(source: str) -> list[tuple[int, str]]:
    """The string constants of ``source`` that are SQL statements."""
    return [
        (line, text)
        for line, text in _string_constants(ast.parse(source))
        if SQL_STATEMENT.match(text)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "select count(*) from t where x = %s",
        "SELECT to_regclass(%s)",
        "  SELECT EXISTS (SELECT 1 FROM {})",
        "INSERT INTO {} (a, b) VALUES (%s, %s)",
        'update "perdure".runs set status = %s',
        "DELETE FROM x.runs WHERE id = %s",
        "\n    CREATE TABLE IF NOT EXISTS {t} (a int)",
        "CREATE UNIQUE INDEX i ON t (a)",
        "ALTER TABLE t ADD COLUMN b int",
        "DROP SCHEMA IF EXISTS s CASCADE",
        "WITH moved AS (DELETE FROM t RETURNING *) SELECT count(*) FROM moved",
        "GRANT USAGE ON SCHEMA s TO r",
        "REVOKE ALL ON t FROM PUBLIC",
        "TRUNCATE t",
        "COPY t (a) FROM STDIN",
    ],
)
def test_the_sql_detector_finds_statements(text: str) -> None:
    assert sql_statements(repr(text)) != []
    escaped = repr(text).replace("{", "{{").replace("}", "}}")
    assert sql_statements(f"f{escaped}") != []  # in an f-string too


@pytest.mark.parametrize(
    "text",
    [
        "Select the runs to show.",
        "Delete the run's rows; keep its history.",
        "drop it when done",
        "update the dashboard",
        "with the worker's id",
        "Create an App; nothing connects until the first call.",
        "SELECTED",
        "copy of the input",
        "grant: the role's rights",
        "DELETE",
    ],
)
def test_the_sql_detector_leaves_prose_alone(text: str) -> None:
    assert sql_statements(repr(text)) == []


def test_sql_text_appears_only_in_the_store() -> None:
    """No module outside perdure.store holds an SQL statement (the CLI and the demo included)."""
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text.strip()[:60]!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "store" not in path.relative_to(PACKAGE).parts
        for line, text in sql_statements(path.read_text())
    ]
    assert found == []


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
