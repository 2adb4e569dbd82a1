"""Metrics, traces and structured logs of perdure workers.

- ``WorkerMetrics``: Prometheus series of one worker, in its own
  registry, served on ``/metrics`` (``perdure worker --metrics-port``).
- ``TracingObserver``: OpenTelemetry spans per run execution and per
  step, children of the trace the run was started in (extra ``perdure[otel]``).
- ``JsonFormatter``, ``LogContextFilter``: log records as JSON lines
  with the run, step, workflow, attempt and worker of each record.

The names are loaded on first use, so that ``import perdure`` imports neither
prometheus_client nor OpenTelemetry. See docs/observability.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.observability.logs import JsonFormatter, LogContextFilter, configure_logging
    from perdure.observability.metrics import WorkerMetrics
    from perdure.observability.tracing import TracingObserver

__all__ = [
    "JsonFormatter",
    "LogContextFilter",
    "TracingObserver",
    "WorkerMetrics",
    "configure_logging",
]

_WHERE = {
    "JsonFormatter": "logs",
    "LogContextFilter": "logs",
    "configure_logging": "logs",
    "WorkerMetrics": "metrics",
    "TracingObserver": "tracing",
}


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` when it is first asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'perdure.observability' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"perdure.observability.{module}"), name)
