"""Nothing leaks sideways: payloads never reach logs, metric labels or trace attributes.

A worker with metrics and tracing on runs a workflow whose input, step result,
signal value, event, stream value and output carry a marker string, and one
that fails with the marker in its error message. Every log record (DEBUG and
up), every line of the metrics endpoint and every span's name, attributes,
events and status are searched for it. With payloads encrypted, error
messages are left out too, unless ``PERDURE_TELEMETRY_PAYLOADS=1`` asks for them.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.observability import WorkerMetrics
from perdure.store.encryption import AesGcm, generate_key_line

MARKER = "leak-marker-5d1e0b"
OPTIONS = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A tracer provider of the test's own, exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _define(app: perdure.App) -> None:
    async def echo(value: str) -> str:
        return f"result {value}"

    @app.workflow("kinds")
    async def kinds(ctx: perdure.Context, order: dict[str, str]) -> dict[str, Any]:
        done = await ctx.step("echo", echo, order["secret"])
        await ctx.set_event("status", order["secret"])
        await ctx.write_stream("tokens", order["secret"])
        got = await ctx.wait_for_signal("approve")
        return {"done": done, "signal": got}

    @app.workflow("fails")
    async def fails(ctx: perdure.Context, value: str) -> str:
        raise perdure.PermanentError(f"failed on {value}")


def _span_text(span: ReadableSpan) -> str:
    parts = [span.name, str(dict(span.attributes or {})), str(span.status.description)]
    parts += [f"{event.name} {dict(event.attributes or {})}" for event in span.events]
    return "\n".join(parts)


def _observe(
    app: perdure.App,
    spans: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> tuple[str, str, str]:
    """Run both workflows on a worker with metrics and traces; (logs, metrics, spans) as text."""
    provider, exporter = spans
    _define(app)
    caplog.set_level(logging.DEBUG)
    with BackgroundWorker(
        app, metrics_port=0, tracing=True, tracer_provider=provider, **OPTIONS
    ) as worker:
        metrics = next(o for o in worker.worker.observer.observers if isinstance(o, WorkerMetrics))
        port = wait_until(lambda: metrics.port, what="the metrics endpoint")
        run = app.start("kinds", {"secret": MARKER})
        failing = app.start("fails", MARKER)
        wait_until(lambda: app.get_run(run.id).status == "waiting", what="the wait")
        app.signal(run.id, "approve", MARKER)
        assert run.result(timeout=60) == {"done": f"result {MARKER}", "signal": MARKER}
        with pytest.raises(perdure.RunFailed):
            failing.result(timeout=60)
        wait_until(lambda: worker.count("execution_finished") >= 3, what="every execution")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            scraped = answer.read().decode()
    logs = "\n".join(
        f"{record.getMessage()} {record.__dict__}"
        + (str(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    traced = "\n".join(_span_text(span) for span in exporter.get_finished_spans())
    assert "perdure_runs_started_total" in scraped and "perdure.run kinds" in traced
    assert "run" in logs  # the workers did log: the search below searched something
    return logs, scraped, traced


def test_with_encryption_no_payload_or_error_message_reaches_logs_metrics_or_spans(
    make_app: Callable[..., perdure.App],
    spans: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PERDURE_TELEMETRY_PAYLOADS", raising=False)
    app = make_app(codec=AesGcm.from_text(generate_key_line("k1")))
    logs, scraped, traced = _observe(app, spans, caplog)
    assert MARKER not in logs
    assert MARKER not in scraped
    assert MARKER not in traced
    # The failure is still reported, by its type.
    assert "PermanentError (message redacted" in logs
    assert "perdure.errors.PermanentError" in traced


def test_without_encryption_payloads_stay_out_and_error_messages_are_reported(
    make_app: Callable[..., perdure.App],
    spans: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    logs, scraped, traced = _observe(app, spans, caplog)
    assert MARKER not in scraped
    # Only the error message quotes it: no input, result, signal, event or stream value.
    for text in (logs, traced):
        assert f"failed on {MARKER}" in text
        assert text.count(MARKER) == text.count(f"failed on {MARKER}")


def test_the_setting_asks_for_error_messages_while_payloads_are_encrypted(
    make_app: Callable[..., perdure.App],
    spans: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_TELEMETRY_PAYLOADS", "1")
    app = make_app(codec=AesGcm.from_text(generate_key_line("k1")))
    logs, scraped, traced = _observe(app, spans, caplog)
    assert f"failed on {MARKER}" in logs and f"failed on {MARKER}" in traced
    assert MARKER not in scraped
