"""perdure: durable workflows for Python on PostgreSQL.

Write a workflow as plain Python; perdure checkpoints each step in Postgres so
runs survive crashes and deploys and resume where they stopped.
"""

from __future__ import annotations

from perdure.api.app import App
from perdure.api.context import ChildRun, Context, SyncChildRun, SyncContext
from perdure.api.filters import RunFilter
from perdure.api.graph import Graph, GraphStep
from perdure.api.handle import RunHandle
from perdure.clock import Clock, VirtualClock
from perdure.engine.options import WorkerOptions
from perdure.engine.retry import RetryPolicy
from perdure.engine.worker import Worker
from perdure.errors import (
    Cancelled,
    ChildFailed,
    ConfigurationError,
    DatabaseUnavailable,
    EventTimeout,
    InvalidPayload,
    InvalidRunState,
    InvalidSchedule,
    LeaseLost,
    MaintenanceBusy,
    NonDeterminismError,
    PerdureError,
    PermanentError,
    ResultTimeout,
    RunCancelled,
    RunFailed,
    RunKeyConflict,
    RunNotFound,
    ScheduleNotFound,
    SchemaError,
    SerializationError,
    SignalTimeout,
    StepFailed,
    StepTimeout,
    UnknownStep,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from perdure.steps import Snooze, StepCall, StepContext
from perdure.types import (
    BulkResult,
    HistoryEvent,
    PruneResult,
    Run,
    RunPage,
    RunRef,
    RunStatus,
    ScheduleInfo,
    Step,
    StepStatus,
)

__version__ = "0.1.0"

__all__ = [
    "App",
    "BulkResult",
    "Cancelled",
    "ChildFailed",
    "ChildRun",
    "Clock",
    "ConfigurationError",
    "Context",
    "DatabaseUnavailable",
    "EventTimeout",
    "Graph",
    "GraphStep",
    "HistoryEvent",
    "InvalidPayload",
    "InvalidRunState",
    "InvalidSchedule",
    "LeaseLost",
    "MaintenanceBusy",
    "NonDeterminismError",
    "PerdureError",
    "PermanentError",
    "PruneResult",
    "ResultTimeout",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunFailed",
    "RunFilter",
    "RunHandle",
    "RunKeyConflict",
    "RunNotFound",
    "RunPage",
    "RunRef",
    "RunStatus",
    "ScheduleInfo",
    "ScheduleNotFound",
    "SchemaError",
    "SerializationError",
    "SignalTimeout",
    "Snooze",
    "Step",
    "StepCall",
    "StepContext",
    "StepFailed",
    "StepStatus",
    "StepTimeout",
    "SyncChildRun",
    "SyncContext",
    "UnknownStep",
    "UnknownWorkflow",
    "VirtualClock",
    "Worker",
    "WorkerOptions",
    "WorkflowDefinitionError",
]
