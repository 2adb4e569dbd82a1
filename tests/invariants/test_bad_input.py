"""Invariant 10: bad input is refused whole, with a typed error and no half-written row."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers


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


# Regressions: each of these once escaped as a raw TypeError, ValueError or
# driver error, or was accepted and broke later.
START_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"delay": math.nan}, "delay must be a non-negative number"),
    ({"delay": math.inf}, "delay must be a non-negative number"),
    ({"delay": 1e300}, "delay must be a non-negative number"),
    ({"timeout": math.inf}, "timeout must be a non-negative number"),
    ({"priority": 2**40}, "priority must be an integer from"),
    ({"version": 2**40}, "version must be an integer from 1"),
    ({"key": "lone \ud800"}, "lone surrogate"),
    ({"conn": "not a connection"}, "conn must be a psycopg.Connection"),
]


@pytest.mark.parametrize(("kwargs", "message"), START_REFUSALS)
def test_out_of_range_start_arguments_are_refused_before_anything_is_written(
    app: perdure.App, db: psycopg.Connection[Any], kwargs: dict[str, Any], message: str
) -> None:
    _define(app)
    app.start("known", 1)
    with pytest.raises(perdure.ConfigurationError, match=message):
        app.start("known", 1, **kwargs)
    assert (_count(db, "runs"), _count(db, "tasks"), _count(db, "history")) == (1, 1, 1)


def test_an_integer_too_long_for_json_text_is_a_serialization_error(app: perdure.App) -> None:
    _define(app)
    with pytest.raises(perdure.SerializationError, match="more than 4300 digits"):
        app.start("known", 10**5000)


READ_REFUSALS: list[tuple[str, Any, type[Exception], str]] = [
    ("list_runs", {"status": "nope"}, perdure.ConfigurationError, "status must be one of"),
    ("list_runs", {"workflow": 5}, perdure.ConfigurationError, "workflow must be a non-empty"),
    ("list_runs", {"since": "yesterday"}, perdure.ConfigurationError, "since must be a datetime"),
    ("list_runs", {"limit": True}, perdure.ConfigurationError, "limit must be an integer"),
    ("get_run", {"ref": "nul\x00"}, perdure.RunNotFound, "no run with id or key"),
    ("get_run", {"ref": "\ud800"}, perdure.RunNotFound, "no run with id or key"),
    ("cancel", {"ref": "a\x00b"}, perdure.RunNotFound, "no run with id or key"),
    ("signal", {"run": "a\x00", "name": "go"}, perdure.RunNotFound, "no run"),
    ("worker", {"lease": 5}, perdure.ConfigurationError, "unknown worker option"),
    ("worker", {"queues": "known"}, perdure.ConfigurationError, "queues must be a list"),
]


@pytest.mark.parametrize(("method", "kwargs", "error", "message"), READ_REFUSALS)
def test_wrong_arguments_to_app_calls_are_typed_errors(
    app: perdure.App, method: str, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    _define(app)
    with pytest.raises(error, match=message):
        getattr(app, method)(**kwargs)


def test_signal_keys_and_cancel_reasons_postgresql_cannot_store_are_refused(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _define(app)
    run = app.start("known", 1)
    with pytest.raises(perdure.ConfigurationError, match="signal key contains the NUL"):
        app.signal(run.id, "go", key="k\x00")
    with pytest.raises(perdure.ConfigurationError, match="reason must be a string without NUL"):
        app.cancel(run.id, reason="why\x00")
    assert _count(db, "signals") == 0 and run.status() == "queued"


@pytest.mark.parametrize(
    "name", ["trailing\n", "known\n", "tab\tname"], ids=["newline", "known-newline", "tab"]
)
def test_a_name_with_a_trailing_newline_is_not_a_valid_name(app: perdure.App, name: str) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError, match="invalid workflow name"):

        @app.workflow(name)
        async def wf(ctx: perdure.Context) -> None:
            return None


def test_a_schema_name_with_a_trailing_newline_is_refused(pg_url: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match="invalid schema name"):
        perdure.App(pg_url, schema="perdure\n")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_delay": "1"}, "initial_delay must be a non-negative number"),
        ({"initial_delay": math.nan}, "initial_delay must be a non-negative number"),
        ({"multiplier": "2"}, "multiplier must be a number from 1 to 1000"),
        ({"jitter": "x"}, "jitter must be a number from 0 to 1"),
        ({"max_attempts": True}, "max_attempts must be an integer"),
        ({"non_retryable": ("ValueError",)}, "non_retryable must be a tuple of exception types"),
    ],
)
def test_retry_policies_check_every_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):
        perdure.RetryPolicy(**kwargs)


def test_a_retry_policy_computes_delays_for_any_attempt_number() -> None:
    policy = perdure.RetryPolicy(max_attempts=10**6, multiplier=1000, max_delay=5, jitter=0)
    assert policy.delay(10**5) == 5
    assert perdure.RetryPolicy(non_retryable=KeyError).non_retryable == (KeyError,)


def test_definitions_refuse_what_is_not_a_function_or_a_policy(app: perdure.App) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError, match="decorates a function"):
        app.workflow("w")(5)  # type: ignore[type-var]
    with pytest.raises(perdure.ConfigurationError, match=r"retry must be a perdure\.RetryPolicy"):
        app.workflow("w", retry=3)  # type: ignore[arg-type]
    graph = app.graph("g")
    with pytest.raises(perdure.WorkflowDefinitionError, match="depends_on takes steps"):
        graph.step("s", depends_on=5)  # type: ignore[arg-type]
    with pytest.raises(perdure.WorkflowDefinitionError, match="timeout must be a positive"):
        graph.step("s", timeout=math.nan)(lambda ctx, value: value)


@pytest.mark.parametrize(
    ("call", "error_type"),
    [
        (lambda ctx: ctx.step("nul\x00", lambda: 1), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.step("s", lambda: 1, timeout="5"), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.transaction("t", 5), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.sleep(math.inf), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.wait_for_signal("a b"), "perdure.errors.WorkflowDefinitionError"),
        (lambda ctx: ctx.wait_for_signal("s", math.nan), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.set_event(5, 1), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.map("m", str, 5), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.start_child("known", key=5), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.start_child("known", version=2**40), "perdure.errors.ConfigurationError"),
        (lambda ctx: ctx.step("s", lambda: 10**5000), "perdure.errors.StepFailed"),
    ],
    ids=[
        "step-name-nul",
        "step-timeout-str",
        "transaction-fn",
        "sleep-inf",
        "signal-name",
        "signal-timeout-nan",
        "event-key-int",
        "map-items-int",
        "child-key-int",
        "child-version-huge",
        "step-output-huge-int",
    ],
)
def test_wrong_ctx_arguments_fail_the_run_at_once_with_a_typed_error(
    app: perdure.App, call: Any, error_type: str
) -> None:
    _define(app)

    @app.workflow("probe", retry=perdure.RetryPolicy(max_attempts=1))
    async def probe(ctx: perdure.Context) -> None:
        made = call(ctx)
        if hasattr(made, "__await__"):
            await made

    handle = app.start("probe")
    with pytest.raises(perdure.RunFailed) as failed:
        app.run_until_complete(handle)
    assert failed.value.error["type"] == error_type
    assert [s.status for s in app.steps(handle.id)] in ([], ["failed"])
