"""Invariant 10: bad input is refused whole, with a typed error and no half-written row."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker


def _count(db: psycopg.Connection[Any], table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def _define(app: perdure.App) -> None:
    @app.workflow("known")
    async def known(ctx: perdure.Context, value: Any) -> Any:
        return value


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        {"when": math.nan},
        [math.inf],
        {1: "non-string key"},
        "nul \x00 inside",
        "lone \ud800 surrogate",
        {"set": {1, 2}},
    ],
    ids=["object", "nan", "inf", "int-key", "nul", "surrogate", "set"],
)
def test_non_json_input_is_refused_and_nothing_is_written(
    app: perdure.App, db: psycopg.Connection[Any], bad: Any
) -> None:
    _define(app)
    app.start("known", 1)  # creates the schema, so the counts below are meaningful
    with pytest.raises(perdure.SerializationError) as refused:
        app.start("known", bad, key="bad-input")
    assert "the input of workflow 'known'" in str(refused.value)
    assert _count(db, "runs") == 1
    assert _count(db, "tasks") == 1
    assert _count(db, "history") == 1


def test_oversized_input_is_refused_with_the_limit_in_the_message(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app(max_payload_bytes=4096)
    _define(app)
    with pytest.raises(perdure.SerializationError, match="4096-byte payload limit"):
        app.start("known", "x" * 5000)
    assert app.start("known", "x" * 100).id


def test_unknown_workflow_is_refused_at_trigger_time(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _define(app)
    app.start("known", 1)
    with pytest.raises(perdure.UnknownWorkflow, match="unknown workflow 'nope'"):
        app.start("nope", {})
    with pytest.raises(perdure.UnknownWorkflow):
        app.start("known", {}, version=2)
    assert _count(db, "runs") == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"key": ""}, perdure.ConfigurationError),
        ({"key": 5}, perdure.ConfigurationError),
        ({"priority": "high"}, perdure.ConfigurationError),
        ({"delay": -1}, perdure.ConfigurationError),
        ({"version": "1"}, perdure.ConfigurationError),
    ],
)
def test_wrong_argument_types_are_refused(
    app: perdure.App, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    _define(app)
    with pytest.raises(error):
        app.start("known", 1, **kwargs)


@pytest.mark.parametrize("name", ["", "has space", "x'; DROP TABLE runs; --", "a" * 200, 7])
def test_invalid_workflow_names_are_refused_at_definition(app: perdure.App, name: Any) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError):

        @app.workflow(name)
        async def wf(ctx: perdure.Context) -> None:
            return None


@pytest.mark.parametrize("schema", ["Upper", "1abc", "has-dash", "x" * 49, "a;b", ""])
def test_invalid_schema_names_are_refused(pg_url: str, schema: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match="invalid schema name"):
        perdure.App(pg_url, schema=schema)


def test_a_key_reused_for_another_workflow_is_a_conflict(app: perdure.App) -> None:
    _define(app)

    @app.workflow("other")
    async def other(ctx: perdure.Context) -> None:
        return None

    app.start("known", 1, key="shared")
    with pytest.raises(perdure.RunKeyConflict, match="'shared' already belongs"):
        app.start("other", key="shared")


def test_determinism_violation_stops_the_run_and_keeps_the_history(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    first = make_app()

    @first.workflow("shipping", version=3)
    async def v1(ctx: perdure.Context) -> str:
        await ctx.step("pack", lambda: "packed")
        raise perdure.PermanentError("stop here, as if a deploy interrupted the run")

    handle = first.start("shipping")
    with BackgroundWorker(first, concurrency=1, poll_seconds=0.05):
        with pytest.raises(perdure.RunFailed):
            handle.result(timeout=20)
    recorded = first.steps(handle.id)
    assert [s.name for s in recorded] == ["pack"]

    # New code asks for a different first step: the guard stops the run.
    second = make_app()

    @second.workflow("shipping", version=3)
    async def v2(ctx: perdure.Context) -> str:
        await ctx.step("weigh", lambda: "weighed")
        return "done"

    second.retry(handle.id)
    with BackgroundWorker(second, concurrency=1, poll_seconds=0.05):
        with pytest.raises(perdure.RunFailed) as failed:
            handle.result(timeout=20)
    error = failed.value.error
    assert error["type"] == "perdure.errors.NonDeterminismError"
    assert error["position"] == 0 and error["recorded"] == "pack" and error["requested"] == "weigh"
    assert handle.id in error["message"] and "version 3" in error["message"]
    after = second.steps(handle.id)
    assert [(s.name, s.output) for s in after] == [("pack", "packed")]
