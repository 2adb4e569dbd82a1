"""The values the store's loaders give for what Python cannot read: their behaviour as values."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import UTC, datetime, timedelta, timezone

from perdure.store.loaders import INFINITY, NEG_INFINITY, InfiniteTime, Undecodable, undecodable


def test_an_infinite_time_sorts_prints_and_converts_as_infinity() -> None:
    now = datetime.now(UTC)
    assert sorted([INFINITY, now, NEG_INFINITY]) == [NEG_INFINITY, now, INFINITY]
    assert (INFINITY.isoformat(), str(NEG_INFINITY)) == ("infinity", "-infinity")
    assert INFINITY.strftime("%Y-%m-%d") == f"{INFINITY:%H:%M}" == "infinity"
    # No time zone can shift it past year 9999.
    assert INFINITY.astimezone(timezone(timedelta(hours=14))) is INFINITY
    assert NEG_INFINITY.astimezone() is NEG_INFINITY
    assert json.dumps({"at": INFINITY.isoformat()}) == '{"at": "infinity"}'


def test_an_infinite_time_survives_copies_and_pickles_and_degrades_in_arithmetic() -> None:
    assert copy.deepcopy(INFINITY) == INFINITY and isinstance(copy.deepcopy(INFINITY), InfiniteTime)
    assert pickle.loads(pickle.dumps(NEG_INFINITY)).isoformat() == "-infinity"
    moved = NEG_INFINITY + timedelta(days=1)
    assert type(moved) is datetime and moved.year == 1
    assert type(INFINITY.replace(year=2000)) is datetime
    assert (INFINITY - datetime.now(UTC)).days > 2_000_000


def test_an_undecodable_value_is_text_that_says_why() -> None:
    try:
        int("9" * 5000)
    except ValueError as exc:
        marker = undecodable(exc)
    assert isinstance(marker, str) and isinstance(marker, Undecodable)
    assert marker == "undecodable payload: an integer with 5000 digits"
    assert marker.reason == "an integer with 5000 digits"
    assert undecodable(RecursionError()).reason == "nested too deeply to decode"
    assert json.loads(json.dumps({"input": marker})) == {"input": str(marker)}
    assert pickle.loads(pickle.dumps(marker)).reason == marker.reason
