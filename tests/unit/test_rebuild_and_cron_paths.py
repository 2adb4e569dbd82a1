"""Pure logic, no database: the less travelled ways through typed rebuilding and cron.

Rebuilding without pydantic reads each annotation kind on its own (Any, None,
dicts, floats, literals, plain classes, dataclass instances); cron refuses a
time zone it could not record and a naive time; a fault removed twice is no
error.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest

from perdure.engine import cron, faults, typed
from perdure.errors import InvalidPayload, InvalidSchedule


@dataclasses.dataclass
class Point:
    x: float
    tags: dict[str, int]
    label: Literal["a", "b"] = "a"
    extra: Any = None
    empty: None = None
    when: datetime | None = None


class Opaque:
    """A class that is neither a model nor a dataclass."""


@pytest.fixture
def without_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typed, "_pydantic", lambda: None)


@pytest.mark.usefixtures("without_pydantic")
def test_rebuilding_without_pydantic_reads_every_kind_of_annotation() -> None:
    hint = typed.Hint(Point)
    built = hint.rebuild({"x": 1, "tags": {"a": 2}, "label": "b", "extra": [1, {"z": None}]}, "w")
    assert built == Point(1.0, {"a": 2}, "b", [1, {"z": None}])
    assert isinstance(built.x, float)
    # An instance is taken as it is; a plain class needs an instance of itself.
    assert hint.rebuild(built, "w") is built
    moment = datetime(2024, 1, 1)
    assert hint.rebuild({"x": 0.5, "tags": {}, "when": moment}, "w").when is moment
    assert typed.Hint(list[Point]).rebuild([], "w") == []


@pytest.mark.usefixtures("without_pydantic")
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": "1", "tags": {}}, "x: expected a number, got '1'"),
        ({"x": True, "tags": {}}, "x: expected a number, got True"),
        ({"x": 1, "tags": []}, "tags: expected an object, got []"),
        ({"x": 1, "tags": {"a": "2"}}, "tags.a: expected int, got '2'"),
        ({"x": 1, "tags": {}, "empty": 0}, "empty: expected null, got 0"),
        ({"x": 1, "tags": {}, "when": "2024"}, "cannot be rebuilt without pydantic"),
        ({"tags": {}, "other": 1}, "other: unknown field"),
        ({"tags": {}}, "x: field required"),
    ],
)
def test_rebuilding_without_pydantic_names_what_does_not_fit(value: Any, message: str) -> None:
    with pytest.raises(InvalidPayload, match=re.escape(message)):
        typed.Hint(Point).rebuild(value, "the input")


@pytest.mark.usefixtures("without_pydantic")
def test_a_plain_class_is_accepted_as_an_instance_only() -> None:
    @dataclasses.dataclass
    class Holder:
        item: Opaque

    item = Opaque()
    assert typed.Hint(Holder).rebuild({"item": item}, "w").item is item
    with pytest.raises(InvalidPayload, match="cannot be rebuilt without pydantic"):
        typed.Hint(Holder).rebuild({"item": {}}, "w")


def test_an_annotation_given_as_text_is_resolved_and_one_that_is_not_is_dropped() -> None:
    def step(value: Point, other: Unknown) -> Point:  # type: ignore[name-defined]  # noqa: F821
        return value

    step.__annotations__["value"] = "Point"
    assert typed.param_hint(step, 0) == typed.Hint(Point)
    assert typed.param_hint(step, 1) is typed.UNTYPED


def test_a_time_zone_without_a_name_is_refused(tmp_path: Path) -> None:
    source = Path("/usr/share/zoneinfo/Europe/Paris")
    if not source.exists():
        import tzdata  # the zone files' package, when the system has none

        source = Path(tzdata.__file__).parent / "zoneinfo" / "Europe" / "Paris"
    with source.open("rb") as file:
        unnamed = ZoneInfo.from_file(file)
    with pytest.raises(InvalidSchedule, match="give a ZoneInfo with a key"):
        cron.parse("0 9 * * *", unnamed, schedule="nightly")
    assert cron.parse("0 9 * * *", ZoneInfo("Europe/Paris")).timezone == "Europe/Paris"


def test_cron_refuses_naive_times() -> None:
    every_minute = cron.parse("* * * * *")
    with pytest.raises(ValueError, match="timezone-aware"):
        cron.next_tick(every_minute, datetime(2024, 1, 1))


def test_removing_a_fault_twice_is_no_error() -> None:
    fault = faults.Fault(step="s", point="before_step")
    faults.install(fault)
    faults.remove(fault)
    faults.remove(fault)
    assert not faults.installed()
