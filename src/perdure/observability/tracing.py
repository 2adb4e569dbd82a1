"""OpenTelemetry spans per run execution and per step (the extra ``perdure[otel]``).

``app.start`` stores the W3C trace context current at the start in the run
(``runs.trace_context``); a tracing worker opens a span per execution of the
run's tasks as a child of that context, and a span per step attempt as a child
of the execution's span. One trace then shows the request that started a run
and every step it executed, on every worker, across retries, sleeps and crashes.

Nothing here imports OpenTelemetry unless the program did first: when
``opentelemetry.trace`` is not in ``sys.modules``, nobody can have configured
a tracer provider or opened a span, and tracing is off at no cost.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

from perdure.engine.control import Outcome
from perdure.engine.observer import Observer, StepAttempt, describe
from perdure.errors import ConfigurationError
from perdure.store.rows import ClaimedTask

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

#: Outcomes and statuses that mark a span as failed.
_FAILED = {"failed", "compensation_failed", "error", "retrying"}


def imported() -> bool:
    """True when the program imported OpenTelemetry's tracing API."""
    return "opentelemetry.trace" in sys.modules


def current_context_json() -> str | None:
    """The propagation headers of the span current now, as JSON; None when there is none.

    What ``app.start`` stores with a run. The headers are those of the global
    propagator (W3C ``traceparent`` and ``tracestate`` by default).
    """
    if not imported():
        return None
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier) if carrier else None


def configured() -> bool:
    """True when the program imported OpenTelemetry and set a tracer provider."""
    if not imported():
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class TracingObserver(Observer):
    """Spans for the executions and steps of a worker, from ``tracer_provider``.

    Without a provider, the global one (``trace.set_tracer_provider``) is used.
    Span names are ``perdure.run <workflow>`` (one per execution of a task:
    a claim of the run, or of one of its parallel or graph steps) and
    ``perdure.step <step>``; their attributes are listed in docs/observability.md.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, redact_errors: bool = False
    ) -> None:
        """Trace with ``tracer_provider`` (default: the global one).

        No payload is ever an attribute. With ``redact_errors`` (payloads
        encrypted), an exception is recorded by its type alone: no message,
        no stack trace, which may quote the data it failed on.
        """
        self.redact_errors = redact_errors
        try:
            from opentelemetry import trace
        except ImportError:
            raise ConfigurationError(
                "tracing needs OpenTelemetry: pip install 'perdure[otel]'"
            ) from None
        self.tracer = trace.get_tracer(
            "perdure", metadata.version("perdure"), tracer_provider=tracer_provider
        )
        #: The span of each task executing now, by task id, and of each run.
        self._tasks: dict[int, Span] = {}
        self._runs: dict[str, Span] = {}

    def execution_started(self, task: ClaimedTask) -> Any:
        """Open the task's span under the run's trace context, and make it current."""
        from opentelemetry import context, propagate, trace

        parent = propagate.extract(task.trace_context) if task.trace_context else None
        span = self.tracer.start_span(
            f"perdure.run {task.workflow}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "perdure.run_id": task.run_id,
                "perdure.workflow": task.workflow,
                "perdure.workflow_version": task.version,
                "perdure.queue": task.queue,
                "perdure.task_kind": task.kind,
                "perdure.attempt": task.fence.attempt,
                "perdure.worker_id": task.fence.worker_id,
            },
        )
        if task.step_name is not None:
            span.set_attribute("perdure.step", task.step_name)
        self._tasks[task.fence.task_id] = span
        self._runs[task.run_id] = span
        return context.attach(trace.set_span_in_context(span))

    def execution_finished(
        self, task: ClaimedTask, token: Any, outcome: Outcome, seconds: float
    ) -> None:
        """Close the task's span with its outcome."""
        from opentelemetry import context

        span = self._tasks.pop(task.fence.task_id, None)
        if self._runs.get(task.run_id) is span:
            del self._runs[task.run_id]
        context.detach(token)
        if span is None:
            return
        span.set_attribute("perdure.outcome", outcome)
        if outcome in _FAILED:
            _set_error(span, outcome)
        span.end()

    def step_started(self, step: StepAttempt) -> Any:
        """Open the step's span under the task's span, and make it current."""
        from opentelemetry import context, trace

        task, name = step.task, step.name
        parent = self._tasks.get(task.fence.task_id)
        span = self.tracer.start_span(
            f"perdure.step {name}",
            context=trace.set_span_in_context(parent) if parent is not None else None,
            attributes={
                "perdure.run_id": task.run_id,
                "perdure.workflow": task.workflow,
                "perdure.workflow_version": task.version,
                "perdure.step": name,
                "perdure.step_kind": step.kind,
                "perdure.attempt": step.attempt,
            },
        )
        return span, context.attach(trace.set_span_in_context(span))

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        """Close the step's span with its status and exception."""
        from opentelemetry import context

        span, attached = token
        context.detach(attached)
        span.set_attribute("perdure.status", status)
        if error is not None:
            self._record(span, error)
        if status in _FAILED:
            _set_error(span, describe(error, self.redact_errors) if error else status)
        span.end()

    def run_retrying(self, task: ClaimedTask, delay: float, error: BaseException) -> None:
        """Record the exception on the task's span."""
        span = self._tasks.get(task.fence.task_id)
        if span is not None:
            self._record(span, error)
            span.set_attribute("perdure.retry_delay", delay)

    def run_finished(
        self, run_id: str, workflow: str, status: str, error: BaseException | None
    ) -> None:
        """Record the run's final status (and exception) on the span that ended it."""
        span = self._runs.get(run_id)
        if span is None:
            return
        span.set_attribute("perdure.run_status", status)
        if error is not None:
            self._record(span, error)
        if status in _FAILED:
            _set_error(span, f"run {status}")

    def _record(self, span: Span, error: BaseException) -> None:
        """The exception on ``span``: in full, or by its type alone when redacting."""
        if not self.redact_errors:
            span.record_exception(error)
            return
        kind = type(error)
        span.add_event(
            "exception",
            {
                "exception.type": f"{kind.__module__}.{kind.__qualname__}",
                "exception.message": "redacted: payloads are encrypted",
            },
        )

    def trace_context(self, task: ClaimedTask) -> str | None:
        """The current span's headers (else the task's): a child run joins its parent's trace."""
        found = current_context_json()
        span = self._tasks.get(task.fence.task_id)
        if found is not None or span is None:
            return found
        # A `def` workflow runs on a thread of its own, where no span is current.
        from opentelemetry import propagate, trace

        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return json.dumps(carrier) if carrier else None


def _set_error(span: Span, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))
