"""Pure logic, no database: what a fork copies, and how typed values are read from hints."""

from __future__ import annotations

import dataclasses
import functools
import re
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from perdure.engine import lineage, typed
from perdure.errors import InvalidPayload, UnknownStep
from perdure.types import Step, StepStatus

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def _step(position: int, name: str, status: str = "completed", **extra: Any) -> Step:
    return Step(
        position=position,
        name=name,
        kind=extra.pop("kind", "step"),
        status=StepStatus(status),
        attempts=1,
        output=extra.pop("output", None),
        error=None,
        worker_id=None,
        started_at=NOW,
        completed_at=NOW,
    )


def test_a_function_fork_copies_the_final_checkpoints_below_the_first_step_of_that_name() -> None:
    steps = [
        _step(0, "a"),
        _step(1, "child:w", kind="child", output={"run_id": "done-child"}),
        _step(2, "child:w", kind="child", output={"run_id": "live-child"}),
        _step(3, "b", "failed"),
        _step(4, "loop"),
        _step(5, "loop"),
    ]
    name, copied = lineage.function_fork("r", steps, "loop", finished_children={"done-child"})
    assert (name, copied) == ("loop", [0, 1, 3])
    assert lineage.function_fork("r", steps, 5) == ("loop", [0, 3, 4])
    with pytest.raises(UnknownStep, match="'a', 'child:w', 'b', 'loop'"):
        lineage.function_fork("r", steps, "c")
    assert lineage.child_runs(steps) == ["done-child", "live-child"]


def test_a_graph_fork_copies_the_steps_not_downstream_of_the_fork_point() -> None:
    # a -> b -> d, a -> c -> d, e alone; position 5 is b's compensation.
    definition = {
        "steps": [
            {"name": "a", "position": 0, "depends_on": []},
            {"name": "b", "position": 1, "depends_on": ["a"]},
            {"name": "c", "position": 2, "depends_on": ["a"]},
            {"name": "d", "position": 3, "depends_on": ["b", "c"]},
            {"name": "e", "position": 4, "depends_on": []},
        ]
    }
    steps = [
        _step(0, "a"),
        _step(1, "b"),
        _step(2, "c", "failed"),
        _step(3, "d", "cancelled"),
        _step(4, "e", "skipped"),
        _step(6, "compensate:b", kind="compensation"),
    ]
    assert lineage.graph_fork("r", definition, steps, "b") == ("b", [0, 4])
    assert lineage.graph_fork("r", definition, steps, "d") == ("d", [0, 1, 4])
    assert lineage.graph_fork("r", definition, steps, 0) == ("a", [4])
    with pytest.raises(UnknownStep):
        lineage.graph_fork("r", definition, steps, "z")


class Model(BaseModel):
    x: int


@dataclasses.dataclass
class Data:
    y: list[int]
    kind: Literal["a", "b"] = "a"
    pair: tuple[int, str] | None = None


def returns_model(a: int, b: Data) -> Model:
    return Model(x=a)


class Callable_:
    def __call__(self, value: Data) -> list[Model]:
        return []


def test_hints_come_from_functions_partials_and_callable_objects() -> None:
    assert typed.return_hint(returns_model) == typed.Hint(Model)
    assert typed.param_hint(returns_model, 1) == typed.Hint(Data)
    assert typed.return_hint(functools.partial(returns_model, 1)) == typed.Hint(Model)
    assert typed.return_hint(Callable_()) == typed.Hint(list[Model])
    assert typed.param_hint(Callable_(), 0) == typed.Hint(Data)
    assert typed.return_hint(lambda: 1) is typed.UNTYPED
    assert not typed.Hint(dict[str, int]).typed and typed.Hint(dict[str, Model]).typed


def test_an_annotation_that_does_not_resolve_is_left_untyped() -> None:
    def step(value: Missing) -> Model:  # type: ignore[name-defined]  # noqa: F821
        return Model(x=1)

    assert typed.param_hint(step, 0) is typed.UNTYPED
    assert typed.return_hint(step) == typed.Hint(Model)


def test_plain_values_of_models_and_dataclasses() -> None:
    assert typed.plain(Model(x=1)) == {"x": 1}
    assert typed.plain(Data([1])) == {"y": [1], "kind": "a", "pair": None}
    assert typed.plain({"x": 1}) is typed.NOT_TYPED
    assert typed.plain(Data) is typed.NOT_TYPED  # the class itself is not a value


def test_rebuilding_without_pydantic_checks_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typed, "_pydantic", lambda: None)
    hint = typed.Hint(Data)
    assert hint.rebuild({"y": [1], "pair": [2, "z"]}, "w") == Data([1], pair=(2, "z"))
    for bad, message in [
        ({"y": [1], "kind": "c"}, "kind: expected one of ('a', 'b')"),
        ({"y": [1], "pair": [1]}, "pair: expected 2 items"),
        ({"y": [True]}, "y[0]: expected int, got True"),
        ([1], "value: expected an object for Data"),
    ]:
        with pytest.raises(InvalidPayload, match=re.escape(message)):
            hint.rebuild(bad, "w")
    assert typed.Hint(float).rebuild(1, "w") == 1.0
