"""The named-query files: parsing, and every query reachable from a typed method."""

from __future__ import annotations

import inspect
import re

import pytest

from perdure.clock import Clock
from perdure.store import queries
from perdure.store.statements import Statements


def test_parse_splits_named_statements_and_drops_comments() -> None:
    text = "-- preamble\n-- name: a_get\n-- reads a\nSELECT 1;\n\n-- name: b_put\nSELECT 2\n"
    assert queries.parse(text) == {"a_get": "SELECT 1", "b_put": "SELECT 2"}


@pytest.mark.parametrize(
    "text", ["-- name: x_y\n-- only a comment\n", "-- name: x_y\nSELECT 1;\n-- name: x_y\nSELECT 2"]
)
def test_parse_refuses_empty_and_duplicate_queries(text: str) -> None:
    with pytest.raises(queries.QueryFileError):
        queries.parse(text)


def test_every_query_is_built_by_a_statements_method() -> None:
    source = "".join(inspect.getsource(cls) for cls in Statements.__mro__[:-1])
    used = set(re.findall(r'"([a-z]+_[a-z_]+)"', source))
    assert set(queries.load_all()) <= used, set(queries.load_all()) - used


def test_names_are_entity_first_and_rendering_fills_both_placeholders() -> None:
    rendered = Statements("perdure", Clock())._queries
    for name, body in rendered.items():
        entities = {
            "run",
            "task",
            "step",
            "worker",
            "workflow",
            "history",
            "signal",
            "event",
            "queue",
            "schedule",
        }
        assert name.split("_")[0] in entities | {"stream"}
        assert "{schema}" not in body and "{now}" not in body
        assert "now()" not in body.replace(queries.NOW_SQL, ""), f"{name} bypasses the clock"
