"""Invariant 10, tried systematically with hypothesis.

Arbitrary values, hostile names and wrong types for every public argument:
each call either round-trips exactly or is refused with a PerdureError that
names the problem, and a refused call leaves every table as it was. Example
counts stay small so the file runs in seconds; a failure prints the example.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perdure
from perdure import RunFilter, testing
from perdure.engine import serialization

TABLES = ("runs", "tasks", "history", "steps", "signals", "events", "queues")
# Function-scoped fixtures are shared by a test's examples on purpose: each
# example compares row counts before and after its own call.
DB_EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
RUN_EXAMPLES = settings(DB_EXAMPLES, max_examples=15)
PURE_EXAMPLES = settings(DB_EXAMPLES, max_examples=150)

HOSTILE_TEXT = [
    "",
    " ",
    "x'; DROP TABLE runs; --",
    'a"b',
    "Robert'); DELETE FROM tasks; --",
    "$$ SELECT 1 $$",
    "%s",
    "%(now)s",
    "{schema}",
    "\\",
    "a\nb",
    "tab\there",
    "bell\x07",
    "esc\x1b[31m",
    "nul\x00",
    "lone\ud800",
    "é漢字🙂",
    "a" * 129,
    "k" * 513,
    "z" * 100_000,
    "trailing\n",
]
names = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40))
# Numbers JSON and jsonb treat differently: big floats, negative zero, huge ints.
edge_numbers = st.one_of(
    st.sampled_from([1e20, -1.5e16, 1e308, -0.0, 5e-324, 2**63]),
    # 4300 digits are accepted, 4301 refused (drawn as a digit count: such an int has no repr).
    st.sampled_from([4300, 4301]).map(lambda digits: 10**digits - 1),
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included: they must be refused
    st.text(),  # NUL and lone surrogates included
    edge_numbers,
)
json_like = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), children, max_size=4),
    ),
    max_leaves=16,
)
# Anything a caller might pass by mistake.
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    names,
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=2)),
    st.datetimes(),
    st.builds(object),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1, 0, 0.0, 1, 10**12]),
)


def counts(db: psycopg.Connection[Any]) -> dict[str, int]:
    """Rows in each of perdure's tables."""
    found = {}
    for table in TABLES:
        row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        found[table] = int(row[0])
    return found


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types and the same key order all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def refused_whole(
    db: psycopg.Connection[Any], call: Callable[[], Any]
) -> tuple[Any, perdure.PerdureError | None]:
    """Run ``call``; a PerdureError is returned and must have left every table unchanged."""
    before = counts(db)
    try:
        return call(), None
    except perdure.PerdureError as exc:
        assert str(exc), "a refusal must say why"
        assert counts(db) == before, f"{type(exc).__name__} left rows behind: {exc}"
        return None, exc


@pytest.fixture
def echo_app(app: perdure.App) -> Iterator[perdure.App]:
    """The test's App with an ``echo`` workflow, its schema created."""

    @app.workflow("echo", retry=perdure.RetryPolicy(max_attempts=1))
    async def echo(ctx: perdure.Context, value: Any) -> Any:
        return value

    app.ensure_schema()
    yield app


@pytest.fixture
def fresh_app(pg_url: str, schema: str) -> Callable[..., perdure.App]:
    """Build an App on the test's schema; use it as a context manager so it closes."""
    return lambda **options: perdure.App(pg_url, schema=schema, **options)


# Values -------------------------------------------------------------------------------


@pytest.mark.all_servers
@PURE_EXAMPLES
@given(value=json_like)
def test_code_sees_on_first_run_exactly_what_a_replay_reads(
    db: psycopg.Connection[Any], value: Any
) -> None:
    """What a step's caller gets at once equals what jsonb gives back on replay."""
    try:
        text, decoded = serialization.roundtrip(value, "the value")
    except perdure.SerializationError as exc:
        assert "the value is not a valid perdure payload" in str(exc)
        return
    row = db.execute("SELECT %s::jsonb", (text,)).fetchone()
    assert row is not None
    assert same(row[0], decoded), (row[0], decoded)


@DB_EXAMPLES
@given(value=json_like)
def test_any_input_is_stored_exactly_or_refused_whole(
    echo_app: perdure.App, db: psycopg.Connection[Any], value: Any
) -> None:
    before = counts(db)
    handle, refused = refused_whole(db, lambda: echo_app.start("echo", value))
    if refused is not None:
        assert isinstance(refused, perdure.SerializationError)
        assert "the input of workflow 'echo'" in str(refused)
        return
    expected = serialization.roundtrip(value, "x")[1]
    assert same(echo_app.get_run(handle.id).input, expected)
    after = counts(db)
    assert (after["runs"], after["tasks"]) == (before["runs"] + 1, before["tasks"] + 1)


@RUN_EXAMPLES
@given(value=json_like)
def test_a_step_output_replays_as_it_was_first_seen(fresh_app: Any, value: Any) -> None:
    clock = perdure.VirtualClock()
    with fresh_app(clock=clock) as app:
        replay_a_step_output(app, clock, value)


def replay_a_step_output(app: perdure.App, clock: perdure.VirtualClock, value: Any) -> None:
    """Crash after a step that returns ``value``; the replay must see the same value."""
    seen: list[Any] = []

    @app.workflow("keep", retry=perdure.RetryPolicy(max_attempts=1))
    async def keep(ctx: perdure.Context) -> Any:
        got = await ctx.step("produce", lambda: value)
        seen.append(got)
        await ctx.step("after", lambda: None)
        return got

    handle = app.start("keep")
    # The worker dies once "produce" is recorded (its checkpoint, held until
    # the workflow's next await, committed): a replay then reads it.
    with testing.crash_after(step="produce"):
        testing.drain(app, lease_seconds=30)
    clock.advance(seconds=31)  # the crashed worker's lease lapses
    try:
        serialization.dumps(value, "x")
    except perdure.SerializationError:
        # The step fails for good with the refusal as its recorded error.
        with pytest.raises(perdure.RunFailed) as failed:
            app.run_until_complete(handle)
        assert "SerializationError" in failed.value.error["message"]
        assert [s.status for s in app.steps(handle.id)] == ["failed"]
        return
    result = app.run_until_complete(handle)
    assert len(seen) == 2 and same(seen[0], seen[1]) and same(result, seen[0])


@DB_EXAMPLES
@given(size=st.integers(min_value=1000, max_value=9000), unicode=st.booleans())
def test_payloads_over_the_limit_are_refused_with_the_limit_named(
    make_app: Any, db: psycopg.Connection[Any], size: int, unicode: bool
) -> None:
    app = make_app(max_payload_bytes=4096)

    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: Any) -> Any:
        return value

    app.ensure_schema()
    value = ("é" if unicode else "x") * (size // 2 if unicode else size)
    encoded = len(serialization.dumps(value, "x", max_bytes=10**6).encode())
    handle, refused = refused_whole(db, lambda: app.start("echo", value))
    if encoded > 4096:
        assert isinstance(refused, perdure.SerializationError)
        assert f"{encoded} bytes is over the 4096-byte payload limit" in str(refused)
    else:
        assert refused is None and app.get_run(handle.id).input == value


@pytest.mark.parametrize("limit", [0, 1023, "1mb", 1.5, True, 2**40, None])
def test_the_payload_limit_itself_is_checked(pg_url: str, limit: Any) -> None:
    with pytest.raises(perdure.ConfigurationError, match="max_payload_bytes"):
        perdure.App(pg_url, max_payload_bytes=limit)


# Hostile names ------------------------------------------------------------------------


@DB_EXAMPLES
@given(name=names)
def test_hostile_workflow_and_queue_names_are_refused_or_round_trip(
    fresh_app: Any, db: psycopg.Connection[Any], name: str
) -> None:
    with fresh_app() as app:
        app.ensure_schema()
        define_and_start(app, db, name)


def define_and_start(app: perdure.App, db: psycopg.Connection[Any], name: str) -> None:
    """Define a workflow and queue called ``name`` and start it, or see both refused."""
    try:

        @app.workflow(name, queue=name)
        async def wf(ctx: perdure.Context) -> None:
            return None

    except perdure.WorkflowDefinitionError as exc:
        assert "invalid workflow name" in str(exc) or "invalid queue name" in str(exc)
        _, refused = refused_whole(db, lambda: app.start(name))
        assert isinstance(refused, perdure.WorkflowDefinitionError)
        return
    run = app.start(name).get()
    assert (run.workflow, run.queue) == (name, name)


@DB_EXAMPLES
@given(key=names)
def test_hostile_keys_are_refused_or_round_trip(
    echo_app: perdure.App, db: psycopg.Connection[Any], key: str
) -> None:
    handle, refused = refused_whole(db, lambda: echo_app.start("echo", 1, key=key))
    if refused is not None:
        assert isinstance(refused, perdure.ConfigurationError) and "key" in str(refused)
        with pytest.raises(perdure.RunNotFound):
            echo_app.get_run(key)
        return
    assert echo_app.get_run(key).key == key
    again = echo_app.start("echo", 2, key=key)
    assert again.id == handle.id and not again.created


@DB_EXAMPLES
@given(name=names, key=st.one_of(st.none(), names), payload=json_like)
def test_hostile_signals_are_refused_whole_or_recorded_as_sent(
    echo_app: perdure.App, db: psycopg.Connection[Any], name: str, key: str | None, payload: Any
) -> None:
    app = echo_app
    handle = app.start("echo")  # no worker runs: it stays queued
    sent, refused = refused_whole(db, lambda: app.signal(handle.id, name, payload, key=key))
    if refused is not None:
        assert isinstance(
            refused,
            perdure.WorkflowDefinitionError
            | perdure.ConfigurationError
            | perdure.SerializationError,
        )
        return
    recorded = [s for s in app.signals(handle.id) if s["id"] == sent]
    assert len(recorded) == 1 and recorded[0]["name"] == name and recorded[0]["key"] == key
    assert same(recorded[0]["payload"], serialization.roundtrip(payload, "x")[1])


@RUN_EXAMPLES
@given(name=names)
def test_hostile_step_and_event_names_are_refused_or_round_trip(fresh_app: Any, name: str) -> None:
    with fresh_app() as app:
        step_and_event_named(app, name)


def step_and_event_named(echo_app: perdure.App, name: str) -> None:
    """A step and an event called ``name``: recorded under that name, or the run refuses it."""

    @echo_app.workflow("named", retry=perdure.RetryPolicy(max_attempts=1))
    async def named(ctx: perdure.Context) -> str:
        await ctx.set_event(name, "published")
        return await ctx.step(name, lambda: "done")

    handle = echo_app.start("named")
    try:
        assert echo_app.run_until_complete(handle) == "done"
    except perdure.RunFailed as failed:
        assert failed.error["type"] == "perdure.errors.ConfigurationError"
        assert echo_app.steps(handle.id) == []
        return
    assert [s.name for s in echo_app.steps(handle.id)] == [f"event:{name}", name]
    assert echo_app.get_event(handle.id, name) == "published"


@given(schema=names)
@settings(max_examples=100)
def test_schema_names_that_are_not_plain_identifiers_are_refused(schema: str) -> None:
    import re

    plain = re.fullmatch(r"[a-z_][a-z0-9_]{0,47}", schema) is not None
    try:
        perdure.App("postgresql://unused", schema=schema)
    except perdure.ConfigurationError as exc:
        assert not plain and "invalid schema name" in str(exc)
    else:
        assert plain


# Wrong types for every public argument ------------------------------------------------

APP_CALLS: dict[str, Callable[[perdure.App, str, Any], Any]] = {
    "start(workflow=)": lambda app, run, v: app.start(v),
    "start(key=)": lambda app, run, v: app.start("echo", 1, key=v),
    "start(version=)": lambda app, run, v: app.start("echo", 1, version=v),
    "start(delay=)": lambda app, run, v: app.start("echo", 1, delay=v),
    "start(priority=)": lambda app, run, v: app.start("echo", 1, priority=v),
    "start(timeout=)": lambda app, run, v: app.start("echo", 1, timeout=v),
    "start(conn=)": lambda app, run, v: app.start("echo", 1, conn=v),
    "signal(run=)": lambda app, run, v: app.signal(v, "go"),
    "signal(name=)": lambda app, run, v: app.signal(run, v),
    "signal(key=)": lambda app, run, v: app.signal(run, "go", key=v),
    "cancel(ref=)": lambda app, run, v: app.cancel(v),
    "cancel(reason=)": lambda app, run, v: app.cancel(run, reason=v),
    "pause(ref=)": lambda app, run, v: app.pause(v),
    "resume(ref=)": lambda app, run, v: app.resume(v),
    "retry(ref=)": lambda app, run, v: app.retry(v),
    "restart(ref=)": lambda app, run, v: app.restart(v),
    "restart(key=)": lambda app, run, v: app.restart(run, key=v),
    "restart(priority=)": lambda app, run, v: app.restart(run, priority=v),
    "fork(from_step=)": lambda app, run, v: app.fork(run, from_step=v),
    "fork(key=)": lambda app, run, v: app.fork(run, from_step=0, key=v),
    "cancel_runs(filter=)": lambda app, run, v: app.cancel_runs(v),
    "cancel_runs(reason=)": lambda app, run, v: app.cancel_runs(RunFilter(runs=[run]), reason=v),
    "cancel_runs(batch_size=)": lambda app, run, v: app.cancel_runs(RunFilter(), batch_size=v),
    "retry_runs(limit=)": lambda app, run, v: app.retry_runs(RunFilter(), dry_run=True, limit=v),
    "retry_runs(dry_run=)": lambda app, run, v: app.retry_runs(RunFilter(runs=[run]), dry_run=v),
    "RunFilter(status=)": lambda app, run, v: app.retry_runs(RunFilter(status=v), dry_run=True),
    "RunFilter(workflow=)": lambda app, run, v: app.retry_runs(RunFilter(workflow=v), dry_run=True),
    "RunFilter(since=)": lambda app, run, v: app.retry_runs(RunFilter(since=v), dry_run=True),
    "RunFilter(parent=)": lambda app, run, v: app.retry_runs(RunFilter(parent=v), dry_run=True),
    "RunFilter(runs=)": lambda app, run, v: app.retry_runs(RunFilter(runs=v), dry_run=True),
    "get_run(ref=)": lambda app, run, v: app.get_run(v),
    "steps(ref=)": lambda app, run, v: app.steps(v),
    "history(ref=)": lambda app, run, v: app.history(v),
    "signals(ref=)": lambda app, run, v: app.signals(v),
    "list_runs(status=)": lambda app, run, v: app.list_runs(status=v),
    "list_runs(workflow=)": lambda app, run, v: app.list_runs(workflow=v),
    "list_runs(since=)": lambda app, run, v: app.list_runs(since=v),
    "list_runs(before=)": lambda app, run, v: app.list_runs(before=v),
    "list_runs(limit=)": lambda app, run, v: app.list_runs(limit=v),
    "list_runs(parent=)": lambda app, run, v: app.list_runs(parent=v),
    "get_event(key=)": lambda app, run, v: app.get_event(run, v),
    "get_event(timeout=)": lambda app, run, v: app.get_event(run, "nothing", timeout=v),
    "read_stream(key=)": lambda app, run, v: list(app.read_stream(run, v)),
    "read_stream(timeout=)": lambda app, run, v: list(app.read_stream(run, "s", timeout=v)),
    "result(timeout=)": lambda app, run, v: app.handle(run).result(timeout=v),
    "queue(name=)": lambda app, run, v: app.queue(v),
    "queue(concurrency=)": lambda app, run, v: app.queue("q", concurrency=v),
    "set_queue(concurrency=)": lambda app, run, v: app.set_queue("q", concurrency=v),
    "set_queue(worker_concurrency=)": lambda app, run, v: app.set_queue("q", worker_concurrency=v),
    "worker(concurrency=)": lambda app, run, v: app.worker(concurrency=v),
    "worker(queues=)": lambda app, run, v: app.worker(queues=v),
    "worker(lease_seconds=)": lambda app, run, v: app.worker(lease_seconds=v),
    "worker(worker_id=)": lambda app, run, v: app.worker(worker_id=v),
    "worker(unknown option)": lambda app, run, v: app.worker(lease=v),
}


@DB_EXAMPLES
@given(call=st.sampled_from(sorted(APP_CALLS)), value=anything)
def test_wrong_arguments_to_app_calls_get_a_typed_error_and_write_nothing(
    echo_app: perdure.App, db: psycopg.Connection[Any], call: str, value: Any
) -> None:
    # A finished run: waits on it (result, events, streams) return at once.
    done = echo_app.start("echo", 1, key="done")
    if done.created:
        echo_app.run_until_complete(done)
    refused_whole(db, lambda: APP_CALLS[call](echo_app, done.id, value))


DEFINITIONS: dict[str, Callable[[perdure.App, Any], Any]] = {
    "workflow(name=)": lambda app, v: app.workflow(v)(lambda ctx: None),
    "workflow(version=)": lambda app, v: app.workflow("w", version=v)(lambda ctx: None),
    "workflow(queue=)": lambda app, v: app.workflow("w", queue=v)(lambda ctx: None),
    "workflow(retry=)": lambda app, v: app.workflow("w", retry=v),
    "workflow(fn)": lambda app, v: app.workflow("w")(v),
    "graph(name=)": lambda app, v: app.graph(v),
    "graph(version=)": lambda app, v: app.graph("g", version=v),
    "graph(queue=)": lambda app, v: app.graph("g", queue=v),
    "graph(retry=)": lambda app, v: app.graph("g", retry=v),
    "graph.step(name=)": lambda app, v: app.graph("g").step(v)(lambda ctx, i: i),
    "graph.step(depends_on=)": lambda app, v: app.graph("g").step(depends_on=v),
    "graph.step(when=)": lambda app, v: app.graph("g").step("s", when=v)(lambda c, i: i),
    "graph.step(compensate=)": lambda app, v: app.graph("g").step("s", compensate=v)(
        lambda c, i: i
    ),
    "graph.step(retry=)": lambda app, v: app.graph("g").step("s", retry=v),
    "graph.step(timeout=)": lambda app, v: app.graph("g").step("s", timeout=v)(lambda c, i: i),
    "graph.step(wait_for_signal=)": lambda app, v: app.graph("g").step("s", wait_for_signal=v)(
        lambda c, i: i
    ),
    "graph.step(signal_timeout=)": lambda app, v: app.graph("g").step(
        "s", wait_for_signal="go", signal_timeout=v
    )(lambda c, i: i),
    "graph.step(join=)": lambda app, v: app.graph("g").step("s", join=v)(lambda c, i: i),
    "graph.step(fn)": lambda app, v: app.graph("g").step("s")(v),
    "RetryPolicy(max_attempts=)": lambda app, v: perdure.RetryPolicy(max_attempts=v),
    "RetryPolicy(initial_delay=)": lambda app, v: perdure.RetryPolicy(initial_delay=v),
    "RetryPolicy(multiplier=)": lambda app, v: perdure.RetryPolicy(multiplier=v),
    "RetryPolicy(max_delay=)": lambda app, v: perdure.RetryPolicy(max_delay=v),
    "RetryPolicy(jitter=)": lambda app, v: perdure.RetryPolicy(jitter=v),
    "RetryPolicy(non_retryable=)": lambda app, v: perdure.RetryPolicy(non_retryable=v),
    "App(url=)": lambda app, v: perdure.App(v, schema="unused"),
    "App(schema=)": lambda app, v: perdure.App("postgresql://unused", schema=v),
    "App(clock=)": lambda app, v: perdure.App("postgresql://unused", clock=v),
    "App(auto_migrate=)": lambda app, v: perdure.App("postgresql://unused", auto_migrate=v),
    "App(pool_size=)": lambda app, v: perdure.App("postgresql://unused", pool_size=v),
}


@given(call=st.sampled_from(sorted(DEFINITIONS)), value=anything)
@settings(max_examples=300, deadline=None)
def test_wrong_arguments_to_definitions_get_a_typed_error(call: str, value: Any) -> None:
    # A fresh App that never connects: definitions are checked before any I/O.
    app = perdure.App("postgresql://unused", schema="unused")
    try:
        made = DEFINITIONS[call](app, value)
    except perdure.PerdureError as exc:
        assert str(exc)
        return
    if isinstance(made, perdure.RetryPolicy):
        made.delay(10**6)  # a policy that was accepted computes every delay
    if isinstance(made, perdure.Graph) and made._steps:
        made.validate()


CTX_CALLS: dict[str, Callable[[perdure.Context, Any], Any]] = {
    "step(name=)": lambda ctx, v: ctx.step(v, lambda: 1),
    "step(fn)": lambda ctx, v: ctx.step("s", v),
    "step(retry=)": lambda ctx, v: ctx.step("s", lambda: 1, retry=v),
    "step(timeout=)": lambda ctx, v: ctx.step("s", lambda: 1, timeout=v),
    "step output": lambda ctx, v: ctx.step("s", lambda: v),
    "transaction(name=)": lambda ctx, v: ctx.transaction(v, lambda conn: 1),
    "transaction(fn)": lambda ctx, v: ctx.transaction("t", v),
    "transaction(retry=)": lambda ctx, v: ctx.transaction("t", lambda conn: 1, retry=v),
    "gather(step)": lambda ctx, v: ctx.gather(v),
    "gather(return_exceptions=)": lambda ctx, v: ctx.gather(
        ctx.step("a", lambda: 1), return_exceptions=v
    ),
    "map(name=)": lambda ctx, v: ctx.map(v, lambda x: x, [1]),
    "map(items=)": lambda ctx, v: ctx.map("m", lambda x: x, v),
    "start_child(workflow=)": lambda ctx, v: ctx.start_child(v),
    "start_child(input=)": lambda ctx, v: ctx.start_child("echo", v),
    "start_child(key=)": lambda ctx, v: ctx.start_child("echo", 1, key=v),
    "start_child(version=)": lambda ctx, v: ctx.start_child("echo", 1, version=v),
    "sleep(delay=)": lambda ctx, v: ctx.sleep(v),
    "sleep_until(when=)": lambda ctx, v: ctx.sleep_until(v),
    "wait_for_signal(name=)": lambda ctx, v: ctx.wait_for_signal(v, timeout=0),
    "wait_for_signal(timeout=)": lambda ctx, v: ctx.wait_for_signal("go", timeout=v),
    "set_event(key=)": lambda ctx, v: ctx.set_event(v, 1),
    "set_event(value=)": lambda ctx, v: ctx.set_event("k", v),
    "write_stream(key=)": lambda ctx, v: ctx.write_stream(v, 1),
    "on_rollback(fn)": lambda ctx, v: ctx.on_rollback(v),
    "on_rollback(name=)": lambda ctx, v: ctx.on_rollback(lambda: None, name=v),
}


@RUN_EXAMPLES
@given(call=st.sampled_from(sorted(CTX_CALLS)), value=anything)
def test_wrong_arguments_inside_a_workflow_fail_the_run_with_a_typed_error(
    fresh_app: Any, call: str, value: Any
) -> None:
    clock = perdure.VirtualClock(datetime(2030, 1, 1, tzinfo=UTC))
    with fresh_app(clock=clock) as app:
        call_inside_a_workflow(app, call, value)


def call_inside_a_workflow(app: perdure.App, call: str, value: Any) -> None:
    """Make the ctx call ``call`` with ``value``: the run completes, waits or fails typed."""

    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: Any) -> Any:
        return value

    @app.workflow("probe", retry=perdure.RetryPolicy(max_attempts=1))
    async def probe(ctx: perdure.Context) -> str:
        made = CTX_CALLS[call](ctx, value)
        if hasattr(made, "__await__"):
            made = await made
        if hasattr(made, "result") and callable(made.result):
            await made.result()
        return "done"

    handle = app.start("probe")
    try:
        assert app.run_until_complete(handle) == "done"
    except perdure.RunFailed as failed:
        error = failed.error
        assert error["type"].startswith("perdure."), error
        assert error["message"], error
    except perdure.ResultTimeout:
        # A valid wait (a sleep, a signal, a child not yet finished): parked, not broken.
        assert handle.status() in ("waiting", "queued"), handle.status()


@pytest.mark.all_servers
@pytest.mark.parametrize("shape", ["list", "object"])
def test_the_deepest_accepted_nesting_is_stored_and_one_more_level_refused(
    echo_app: perdure.App, db: psycopg.Connection[Any], shape: str
) -> None:
    def nest(levels: int) -> Any:
        value: Any = "core"
        for _ in range(levels):
            value = [value] if shape == "list" else {"k": value}
        return value

    deepest = nest(serialization.MAX_DEPTH)
    handle = echo_app.start("echo", deepest)
    assert echo_app.get_run(handle.id).input == deepest
    _, refused = refused_whole(
        db, lambda: echo_app.start("echo", nest(serialization.MAX_DEPTH + 1))
    )
    assert isinstance(refused, perdure.SerializationError) and "nested deeper" in str(refused)
