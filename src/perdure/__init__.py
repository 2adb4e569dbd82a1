"""perdure: durable workflows for Python on PostgreSQL.

Write a workflow as plain Python; perdure checkpoints each step in Postgres so
runs survive crashes and deploys and resume where they stopped.
"""

from __future__ import annotations

from perdure.api.app import App
from perdure.api.context import Context, SyncContext
from perdure.api.handle import RunHandle
from perdure.clock import Clock, VirtualClock
from perdure.engine.control import Snooze
from perdure.engine.retry import RetryPolicy
from perdure.engine.worker import Worker, WorkerOptions
from perdure.errors import (
    Cancelled,
    ConfigurationError,
    DatabaseUnavailable,
    EventTimeout,
    InvalidRunState,
    LeaseLost,
    NonDeterminismError,
    PerdureError,
    PermanentError,
    ResultTimeout,
    RunCancelled,
    RunFailed,
    RunKeyConflict,
    RunNotFound,
    SchemaError,
    SerializationError,
    SignalTimeout,
    StepFailed,
    StepTimeout,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from perdure.types import HistoryEvent, Run, RunStatus, Step, StepStatus

__version__ = "0.1.0"

__all__ = [
    "App",
    "Cancelled",
    "Clock",
    "ConfigurationError",
    "Context",
    "DatabaseUnavailable",
    "EventTimeout",
    "HistoryEvent",
    "InvalidRunState",
    "LeaseLost",
    "NonDeterminismError",
    "PerdureError",
    "PermanentError",
    "ResultTimeout",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunKeyConflict",
    "RunNotFound",
    "RunStatus",
    "SchemaError",
    "SerializationError",
    "SignalTimeout",
    "Snooze",
    "Step",
    "StepFailed",
    "StepStatus",
    "StepTimeout",
    "SyncContext",
    "UnknownWorkflow",
    "VirtualClock",
    "Worker",
    "WorkerOptions",
    "WorkflowDefinitionError",
]
