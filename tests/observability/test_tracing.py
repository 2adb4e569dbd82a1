"""OpenTelemetry: a run started inside a span is traced, execution and steps, in that trace.

The tests use the SDK's in-memory exporter and pass their own tracer provider
to the worker (the global provider can be set only once per process).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import perdure
from helpers import BackgroundWorker, wait_until

FAST_RETRY = perdure.RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
OPTIONS = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A tracer provider that keeps finished spans in memory."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def named(found: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    """The spans called ``name``, in the order they ended."""
    return [s for s in found if s.name == name]


async def noop() -> int:
    return 1


def refuse() -> int:
    raise ValueError("card declined")


def test_a_run_started_in_a_span_is_traced_in_that_trace(
    app: perdure.App, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans

    @app.workflow("checkout", version=2)
    async def checkout(ctx: perdure.Context) -> int:
        return await ctx.step("reserve", noop) + await ctx.step("charge", noop)

    with provider.get_tracer("test").start_as_current_span("POST /orders") as request:
        handle = app.start("checkout")
    started = request.get_span_context()
    with BackgroundWorker(app, tracer_provider=provider, **OPTIONS) as worker:
        assert handle.result(timeout=60) == 2
        wait_until(lambda: worker.count("execution_finished") == 1)
    found = exporter.get_finished_spans()
    [run] = named(found, "perdure.run checkout")
    reserve, charge = named(found, "perdure.step reserve") + named(found, "perdure.step charge")
    assert run.context.trace_id == started.trace_id
    assert run.parent is not None and run.parent.span_id == started.span_id
    assert run.kind == trace.SpanKind.CONSUMER
    for step in (reserve, charge):
        assert step.context.trace_id == started.trace_id
        assert step.parent is not None and step.parent.span_id == run.context.span_id
        assert step.attributes is not None and step.attributes["perdure.status"] == "completed"
        assert step.attributes["perdure.attempt"] == 1
        assert step.attributes["perdure.run_id"] == handle.id
    assert run.attributes == {
        "perdure.run_id": handle.id,
        "perdure.workflow": "checkout",
        "perdure.workflow_version": 2,
        "perdure.queue": "checkout",
        "perdure.task_kind": "run",
        "perdure.attempt": 1,
        "perdure.worker_id": worker.worker.id,
        "perdure.run_status": "completed",
        "perdure.outcome": "completed",
    }
    assert reserve.end_time is not None and charge.start_time is not None
    assert reserve.end_time <= charge.start_time


def test_each_execution_and_attempt_has_its_span_and_failures_record_the_exception(
    app: perdure.App, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans

    @app.workflow("pay")
    async def pay(ctx: perdure.Context) -> int:
        await ctx.step("prepare", noop)
        return await ctx.step("charge", refuse, retry=FAST_RETRY)

    with provider.get_tracer("test").start_as_current_span("job") as job:
        handle = app.start("pay")
    with BackgroundWorker(app, tracer_provider=provider, **OPTIONS) as worker:
        with pytest.raises(perdure.RunFailed):
            handle.result(timeout=60)
        wait_until(lambda: worker.count("execution_finished") >= 2)
        print("TASKS_DONE", worker.count("execution_finished"))
    found = exporter.get_finished_spans()
    runs = named(found, "perdure.run pay")
    charges = named(found, "perdure.step charge")
    assert [r.attributes["perdure.outcome"] for r in runs if r.attributes] == [
        "suspended",
        "failed",
    ]
    # Both executions belong to the trace of the span the run was started in.
    assert {r.context.trace_id for r in runs} == {job.get_span_context().trace_id}
    assert all(r.parent and r.parent.span_id == job.get_span_context().span_id for r in runs)
    assert [c.attributes["perdure.attempt"] for c in charges if c.attributes] == [1, 2]
    assert [c.attributes["perdure.status"] for c in charges if c.attributes] == [
        "retrying",
        "failed",
    ]
    for charge, run in zip(charges, runs, strict=True):
        assert charge.parent is not None and charge.parent.span_id == run.context.span_id
        assert charge.status.status_code == trace.StatusCode.ERROR
        [event] = charge.events
        assert event.name == "exception"
        assert event.attributes and event.attributes["exception.type"] == "ValueError"
    assert runs[1].status.status_code == trace.StatusCode.ERROR
    assert runs[1].attributes and runs[1].attributes["perdure.run_status"] == "failed"
    # 'prepare' ran once: the second execution replayed it without a span.
    assert len(named(found, "perdure.step prepare")) == 1


def test_a_run_started_outside_any_span_gets_a_trace_of_its_own(
    app: perdure.App,
    spans: tuple[TracerProvider, InMemorySpanExporter],
    db: psycopg.Connection[tuple[object, ...]],
) -> None:
    provider, exporter = spans

    @app.workflow("lonely")
    async def lonely(ctx: perdure.Context) -> int:
        return await ctx.step("only", noop)

    handle = app.start("lonely")
    assert db.execute("SELECT trace_context FROM runs").fetchone() == (None,)
    with BackgroundWorker(app, tracer_provider=provider, **OPTIONS) as worker:
        handle.result(timeout=60)
        wait_until(lambda: worker.count("execution_finished") == 1)
    [run] = named(exporter.get_finished_spans(), "perdure.run lonely")
    [step] = named(exporter.get_finished_spans(), "perdure.step only")
    assert run.parent is None
    assert step.parent is not None and step.parent.span_id == run.context.span_id


def test_start_stores_the_w3c_traceparent_from_sync_and_async_code(
    app: perdure.App,
    spans: tuple[TracerProvider, InMemorySpanExporter],
    db: psycopg.Connection[tuple[object, ...]],
) -> None:
    provider, _ = spans

    @app.workflow("w")
    async def w(ctx: perdure.Context) -> None:
        return None

    tracer = provider.get_tracer("test")

    async def start_async() -> str:
        with tracer.start_as_current_span("async caller"):
            return (await app.start_async("w", key="from-async")).id

    with tracer.start_as_current_span("sync caller") as caller:
        sync_id = app.start("w", key="from-sync").id
    async_id = asyncio.run(start_async())
    stored = dict(db.execute("SELECT id::text, trace_context FROM runs").fetchall())
    c = caller.get_span_context()
    assert stored[sync_id] == {
        "traceparent": f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"
    }
    # The async caller's span was a root of its own: another trace.
    version, trace_id, span_id, flags = stored[async_id]["traceparent"].split("-")  # type: ignore[index]
    assert (version, len(span_id), flags) == ("00", 16, f"{c.trace_flags:02x}")
    assert trace_id != f"{c.trace_id:032x}"


def test_a_child_run_joins_its_parents_trace(
    app: perdure.App, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans

    @app.workflow("child")
    async def child(ctx: perdure.Context) -> int:
        return await ctx.step("work", noop)

    @app.workflow("parent")
    async def parent(ctx: perdure.Context) -> int:
        started = await ctx.start_child("child")
        return int(await started.result())

    with provider.get_tracer("test").start_as_current_span("request") as request:
        handle = app.start("parent")
    with BackgroundWorker(app, tracer_provider=provider, **OPTIONS):
        assert handle.result(timeout=60) == 1
        wait_until(lambda: len(named(exporter.get_finished_spans(), "perdure.run parent")) >= 2)
    found = exporter.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    [child_run] = named(found, "perdure.run child")
    parent_spans = {s.context.span_id for s in named(found, "perdure.run parent")}
    assert child_run.context.trace_id == trace_id
    assert child_run.parent is not None and child_run.parent.span_id in parent_spans
    [work] = named(found, "perdure.step work")
    assert work.context.trace_id == trace_id


def test_no_tracing_without_a_provider(app: perdure.App) -> None:
    @app.workflow("w")
    async def w(ctx: perdure.Context) -> None:
        return None

    # The global provider is OpenTelemetry's default proxy: nothing configured.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    worker = app.worker()
    kinds = {type(o).__name__ for o in worker.observer.observers}
    # The worker's own observers only: its log, and the steps in flight that
    # its loop watch names.
    assert kinds == {"LoggingObserver", "StepsInFlight"}


def test_a_graph_run_traces_its_steps_in_the_trace_it_was_started_in(
    app: perdure.App, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    etl = app.graph("etl")

    @etl.step()
    def extract(ctx: perdure.StepContext, n: int) -> list[int]:
        return list(range(n))

    @etl.step(depends_on=[extract])
    async def load(ctx: perdure.StepContext, rows: list[int]) -> int:
        return len(rows)

    with provider.get_tracer("test").start_as_current_span("cron tick") as tick:
        handle = app.start("etl", 3)
    with BackgroundWorker(app, tracer_provider=provider, **OPTIONS) as worker:
        assert handle.result(timeout=60) == {"load": 3}
        # The worker that made a step ready runs it in the same execution
        # (see engine.graph): here the run's first task runs both steps.
        wait_until(lambda: worker.count("execution_finished") == 1)
    found = exporter.get_finished_spans()
    [execution] = named(found, "perdure.run etl")
    assert execution.attributes is not None
    assert execution.attributes["perdure.task_kind"] == "run"
    assert execution.context.trace_id == tick.get_span_context().trace_id
    for name in ("extract", "load"):
        [step] = named(found, f"perdure.step {name}")
        assert step.context.trace_id == tick.get_span_context().trace_id
        assert step.parent is not None and step.parent.span_id == execution.context.span_id
    # The execution that finished the run carries the run's status.
    assert execution.attributes["perdure.run_status"] == "completed"


def test_without_opentelemetry_in_the_program_nothing_is_imported(
    pg_url: str, schema: str, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A program that never imports OpenTelemetry starts and serves runs without it."""
    program = textwrap.dedent(
        f"""
        import sys
        import perdure

        app = perdure.App({pg_url!r}, schema={schema!r})

        @app.workflow("w")
        async def w(ctx):
            return await ctx.step("s", lambda: 1)

        handle = app.start("w")
        assert app.run_until_complete(handle) == 1
        app.worker()
        loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "prometheus")))
        print(loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert db.execute("SELECT trace_context FROM runs").fetchall() == [(None,)]
