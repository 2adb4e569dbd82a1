"""Typed inputs and outputs: Pydantic models and dataclasses in, JSON stored, types back out."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, Field

import perdure
from perdure.engine import typed


class Order(BaseModel):
    sku: str
    quantity: int = Field(gt=0)
    note: str | None = None


class Line(BaseModel):
    sku: str
    cents: int


@dataclasses.dataclass
class Stamp:
    by: str
    at: datetime


@dataclasses.dataclass
class Box:
    label: str
    lines: list[Line]
    stamp: Stamp | None = None


@dataclasses.dataclass
class Plain:
    name: str
    sizes: list[int]
    parent: Plain | None = None


class Approval(BaseModel):
    approver: str
    ok: bool


def _rows(db: psycopg.Connection[Any]) -> tuple[int, int, int]:
    counts = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "tasks")]
    history = db.execute("SELECT count(*) FROM history").fetchone()[0]
    return counts[0], counts[1], history


def test_an_invalid_pydantic_input_is_refused_at_start_and_nothing_is_written(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("order")
    async def order(ctx: perdure.Context, order: Order) -> int:
        return order.quantity

    app.ensure_schema()
    for bad in ({"sku": "tea", "quantity": 0}, {"quantity": 2}, "tea", Line(sku="x", cents=1)):
        with pytest.raises(perdure.InvalidPayload) as refused:
            app.start("order", bad)
        assert isinstance(refused.value, perdure.SerializationError)
        assert "the input of workflow 'order'" in str(refused.value)
    assert refused.value.errors, "the error lists what was wrong"
    with pytest.raises(perdure.InvalidPayload, match="quantity: Input should be greater than 0"):
        app.start("order", {"sku": "tea", "quantity": 0}, key="k")
    assert _rows(db) == (0, 0, 0)

    handle = app.start("order", {"sku": "tea", "quantity": "2"})  # pydantic's coercion
    same = app.start("order", Order(sku="tea", quantity=2), key="as-model")
    stored = [r[0] for r in db.execute("SELECT input FROM runs ORDER BY created_at, id")]
    assert stored == [{"sku": "tea", "quantity": 2, "note": None}] * 2
    assert app.run_until_complete(handle) == 2 and app.run_until_complete(same) == 2


def test_results_and_step_outputs_of_nested_types_come_back_as_their_types(
    app: perdure.App,
) -> None:
    seen: dict[str, Any] = {}
    when = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)

    def lines(order: Order) -> list[Line]:
        return [Line(sku=order.sku, cents=100 * i) for i in range(1, order.quantity + 1)]

    def by_sku(found: list[Line]) -> dict[str, Line]:
        return {line.sku + str(line.cents): line for line in found}

    def stamp() -> Stamp | None:
        return Stamp(by="robot", at=when)

    def nothing() -> Stamp | None:
        return None

    @app.workflow("pack")
    def pack(ctx: perdure.SyncContext, order: Order) -> Box:
        found = ctx.step("lines", lines, order)
        keyed = ctx.step("by_sku", by_sku, found)
        seen.update(found=found, keyed=keyed, stamp=ctx.step("stamp", stamp))
        seen["nothing"] = ctx.step("nothing", nothing)
        return Box(label=order.sku, lines=list(keyed.values()), stamp=seen["stamp"])

    handle = app.start("pack", Order(sku="tea", quantity=2))
    box = app.run_until_complete(handle)
    assert box == Box(
        "tea", [Line(sku="tea", cents=100), Line(sku="tea", cents=200)], Stamp("robot", when)
    )
    assert isinstance(seen["found"][0], Line) and isinstance(seen["keyed"]["tea200"], Line)
    assert seen["stamp"].at == when and seen["nothing"] is None
    # Stored as plain JSON that SQL reads; the datetime as ISO text.
    run = handle.get()
    assert run.output["stamp"] == {"by": "robot", "at": "2024-05-01T12:30:00Z"}
    steps = {s.name: s.output for s in app.steps(handle.id)}
    assert steps["lines"] == [{"sku": "tea", "cents": 100}, {"sku": "tea", "cents": 200}]


def test_a_step_output_that_does_not_fit_its_annotation_fails_the_step_unrecorded(
    app: perdure.App,
) -> None:
    calls: list[int] = []

    def wrong() -> Line:
        calls.append(1)
        return {"sku": "tea"}  # type: ignore[return-value]

    @app.workflow("wrong")
    async def wf(ctx: perdure.Context) -> None:
        await ctx.step("wrong", wrong)

    handle = app.start("wrong")
    with pytest.raises(perdure.RunFailed, match="cents: Field required"):
        app.run_until_complete(handle)
    assert calls == [1], "a value that can never fit is not retried"
    [step] = app.steps(handle.id)
    assert (step.status, step.output) == (perdure.StepStatus.FAILED, None)
    assert step.error is not None and step.error["type"] == "perdure.errors.InvalidPayload"


def test_typed_signals_gathers_and_transactions(app: perdure.App) -> None:
    def line(i: int) -> Line:
        return Line(sku=f"s{i}", cents=i)

    def record(conn: psycopg.Connection[Any], i: int) -> Line:
        conn.execute("SELECT 1")
        return Line(sku="tx", cents=i)

    @app.workflow("approve")
    async def approve(ctx: perdure.Context) -> dict[str, Any]:
        got = await ctx.wait_for_signal("approval", type=Approval)
        both = await ctx.gather(ctx.step("a", line, 1), ctx.step("b", line, 2))
        tx = await ctx.transaction("tx", record, 3)
        return {
            "approval": type(got).__name__,
            "both": [type(x).__name__ for x in both],
            "tx": type(tx).__name__,
        }

    handle = app.start("approve")
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)
    app.signal(handle.id, "approval", Approval(approver="ann", ok=True))
    assert app.run_until_complete(handle) == {
        "approval": "Approval",
        "both": ["Line", "Line"],
        "tx": "Line",
    }
    assert app.signals(handle.id)[0]["payload"] == {"approver": "ann", "ok": True}


def test_a_graph_passes_typed_outputs_along(app: perdure.App) -> None:
    g = app.graph("typed_graph")

    @g.step()
    def take(ctx: perdure.StepContext, order: Order) -> list[Line]:
        return [Line(sku=order.sku, cents=5)] * order.quantity

    @g.step(depends_on=[take], when=lambda found: isinstance(found[0], Line))
    def total(ctx: perdure.StepContext, found: list[Line]) -> Line:
        return Line(sku=found[0].sku, cents=sum(x.cents for x in found))

    with pytest.raises(perdure.InvalidPayload):
        app.start("typed_graph", {"sku": "tea"})
    handle = app.start("typed_graph", Order(sku="tea", quantity=3))
    assert app.run_until_complete(handle) == {"total": Line(sku="tea", cents=15)}


def test_dataclasses_work_without_pydantic(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(typed, "_pydantic", lambda: None)
    seen: list[str] = []

    def grow(p: Plain) -> Plain:
        return Plain(p.name + "!", [*p.sizes, len(p.sizes)], parent=p)

    @app.workflow("plain")
    def plain(ctx: perdure.SyncContext, p: Plain) -> Plain:
        grown = ctx.step("grow", grow, p)
        seen.append(type(grown.parent).__name__)
        return grown

    with pytest.raises(perdure.InvalidPayload, match=r"sizes\[1\]: expected int"):
        app.start("plain", {"name": "a", "sizes": [1, "2"]})
    with pytest.raises(
        perdure.InvalidPayload, match="colour: unknown field; sizes: field required"
    ):
        app.start("plain", {"name": "a", "colour": "red"})
    handle = app.start("plain", {"name": "a", "sizes": [1]})
    assert app.run_until_complete(handle) == Plain("a!", [1, 1], parent=Plain("a", [1]))
    assert seen == ["Plain"]
    assert handle.get().output == {
        "name": "a!",
        "sizes": [1, 1],
        "parent": {"name": "a", "sizes": [1], "parent": None},
    }


def test_untyped_annotations_are_left_alone(app: perdure.App) -> None:
    @app.workflow("loose")
    async def loose(ctx: perdure.Context, n: int) -> int:
        return n  # annotated int, but no model or dataclass: nothing is checked

    assert app.run_until_complete(app.start("loose", "not a number")) == "not a number"


def test_a_result_that_does_not_fit_its_annotation_fails_the_run(app: perdure.App) -> None:
    @app.workflow("bad_result")
    async def bad_result(ctx: perdure.Context) -> Line:
        return {"sku": "tea"}  # type: ignore[return-value]

    handle = app.start("bad_result")
    with pytest.raises(perdure.RunFailed, match="the result of workflow 'bad_result'"):
        app.run_until_complete(handle)
    assert handle.get().error["type"] == "perdure.errors.InvalidPayload"
