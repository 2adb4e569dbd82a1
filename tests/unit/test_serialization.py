"""JSON checks: what is refused, what round-trips, and the error record."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perdure.engine import serialization
from perdure.errors import SerializationError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text().filter(lambda t: "\x00" not in t),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text().filter(lambda t: "\x00" not in t), children, max_size=5)
    ),
    max_leaves=30,
)


@given(json_values)
def test_json_values_round_trip(value: Any) -> None:
    text, decoded = serialization.roundtrip(value, "value")
    assert decoded == json.loads(text) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "no JSON representation"),
        ({"a": [math.inf]}, "no JSON representation"),
        ({1: "x"}, "JSON keys are strings"),
        ("a\x00b", "NUL"),
        ({"k\x00": 1}, "NUL"),
        ("\udc80", "lone surrogate"),
        (b"bytes", "is not JSON"),
        ({"s": {1}}, "is not JSON"),
    ],
)
def test_values_json_or_jsonb_cannot_hold_are_refused(value: Any, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason) as refused:
        serialization.dumps(value, "the input")
    assert "the input is not a valid perdure payload" in str(refused.value)


def test_deep_nesting_and_size_limit_are_refused() -> None:
    deep: Any = []
    for _ in range(serialization.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(SerializationError, match="nested deeper"):
        serialization.dumps(deep, "x")
    with pytest.raises(SerializationError, match="100-byte payload limit"):
        serialization.dumps("y" * 200, "x", max_bytes=100)


def test_tuples_become_lists() -> None:
    assert serialization.roundtrip((1, (2, 3)), "x")[1] == [1, [2, 3]]


def test_error_record_names_the_type_and_survives_nul() -> None:
    record = serialization.error_record(ValueError("bad\x00value"), "Traceback ...")
    assert record["type"] == "ValueError" and record["traceback"] == "Traceback ..."
    assert "\\u0000" not in serialization.error_json(record)


def test_holds_long_text_looks_one_level_deep() -> None:
    from perdure.engine.serialization import BIG_TEXT, holds_long_text

    long = "x" * BIG_TEXT
    assert holds_long_text(long)
    assert holds_long_text([1, long]) and holds_long_text((long,))
    assert holds_long_text({"text": long})
    assert not holds_long_text(long[:-1])
    assert not holds_long_text({"deeper": [long]})
    assert not holds_long_text(12) and not holds_long_text(None)
