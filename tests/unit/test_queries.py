"""The named-query files: parsing, fragments, and one entity namespace per file."""

from __future__ import annotations

import inspect
from importlib import resources

import pytest

from perdure.clock import Clock
from perdure.store import queries
from perdure.store.statements import Statements

FOLDER = resources.files("perdure.store") / "sql" / "queries"
FILES = {e.name[: -len(".sql")]: e for e in FOLDER.iterdir() if e.name.endswith(".sql")}


def test_parse_splits_named_statements_and_drops_comments() -> None:
    text = "-- preamble\n-- name: a_get\n-- reads a\nSELECT 1;\n\n-- name: b_put\nSELECT 2\n"
    assert queries.parse(text) == {"a_get": "SELECT 1", "b_put": "SELECT 2"}


@pytest.mark.parametrize(
    "text",
    [
        "-- name: x_y\n-- only a comment\n",
        "-- name: x_y\nSELECT 1;\n-- name: x_y\nSELECT 2",
        "-- fragment: x_y\nTRUE\n-- name: x_y\nSELECT 2",
    ],
)
def test_parse_refuses_empty_and_duplicate_queries(text: str) -> None:
    with pytest.raises(queries.QueryFileError):
        queries.parse(text)


def test_a_fragment_is_placed_where_a_query_names_it_and_is_no_query() -> None:
    text = (
        "-- fragment: even\n-- a shared criterion\n(n % 2 = 0)\n"
        "-- name: n_list\nSELECT n FROM t WHERE {even} AND n > 1"
    )
    assert queries.parse(text) == {"n_list": "SELECT n FROM t WHERE {even} AND n > 1"}
    placed = queries.inline(queries.parse(text), {"even": "(n % 2 = 0)"})
    assert placed == {"n_list": "SELECT n FROM t WHERE (n % 2 = 0) AND n > 1"}
    # {schema} and {now} are left to rendering; a name that is no fragment is refused.
    assert queries.inline({"a": "{schema}.t {now}"}, {}) == {"a": "{schema}.t {now}"}
    # A fragment of several lines takes the indentation of the line naming it.
    nested = queries.inline({"a": "SELECT 1\n    WHERE {two}"}, {"two": "x\n  AND y"})
    assert nested == {"a": "SELECT 1\n    WHERE x\n    AND y"}
    with pytest.raises(queries.QueryFileError, match="unknown fragment"):
        queries.inline({"a": "SELECT {nothing}"}, {})


def test_every_file_is_one_namespace_whose_class_builds_each_of_its_queries() -> None:
    statements = Statements("perdure", Clock())
    namespaces = {
        name for name in vars(statements) if name not in ("schema", "clock", "channel", "payloads")
    }
    assert namespaces == set(FILES)
    for stem, entry in FILES.items():
        source = inspect.getsource(type(getattr(statements, stem)))
        for name in queries.parse(entry.read_text(encoding="utf-8")):
            assert f'"{name}"' in source, f"{name} ({stem}.sql) is built by no method"
            if stem != "batch":
                # <entity>_<verb> lives in <entities>.sql (history: history.sql).
                assert stem.startswith(name.split("_")[0]), (stem, name)


def test_names_are_entity_first_and_rendering_fills_every_placeholder() -> None:
    rendered = queries.render('"perdure"')
    assert set(rendered) == set(queries.load_all())
    for name, body in rendered.items():
        assert name.split("_")[0] + "s" in FILES or name.startswith("history_"), name
        assert "{" not in body.replace("'{}'", ""), f"{name} keeps a placeholder"
        assert "now()" not in body.replace(queries.NOW_SQL, ""), f"{name} bypasses the clock"
