"""The README's guarantees each name the tests that prove them, and those tests exist and run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def guarantees() -> list[str]:
    """The numbered items of the README's Guarantees section, one string each."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Guarantees\n", 1)[1].split("\n#", 1)[0]
    body = "1. " + section.split("\n1. ", 1)[1]
    items = re.split(r"\n(?=\d+\. )", body)
    return [" ".join(item.split()) for item in items if item.strip()]


def _skip_marks(decorators: list[ast.expr]) -> list[str]:
    """The skip and xfail marks among ``decorators``, as source text."""
    found = []
    for decorator in decorators:
        text = ast.unparse(decorator)
        if re.search(r"\bmark\.(skip|skipif|xfail)\b", text):
            found.append(text)
    return found


def test_the_readme_lists_ten_guarantees_and_each_names_a_test() -> None:
    items = guarantees()
    assert [item.split(".", 1)[0] for item in items] == [str(n) for n in range(1, 11)]
    for item in items:
        assert NAMED.search(item), f"guarantee without a named test: {item}"


@pytest.mark.parametrize(
    ("path", "name"),
    sorted({found for item in guarantees() for found in NAMED.findall(item)}),
)
def test_each_named_test_exists_and_is_not_skipped(path: str, name: str) -> None:
    source = ROOT / path
    assert source.is_file(), f"{path} does not exist"
    tree = ast.parse(source.read_text())
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert name in functions, f"{path} has no test {name}"
    assert not _skip_marks(functions[name].decorator_list), f"{path}::{name} is marked skipped"
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            assert not _skip_marks([node.value]), f"{path} skips all its tests"
    # The test runs as part of the default command: the file is under a test path.
    assert path.startswith("tests/") and Path(path).name.startswith("test_")
