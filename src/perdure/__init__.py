"""perdure: durable workflows for Python on PostgreSQL.

Write a workflow as plain Python; perdure checkpoints each step in Postgres so
runs survive crashes and deploys and resume where they stopped.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        BlockingCallInEventLoop,
        Cancelled,
        ChildFailed,
        ConfigurationError,
        DatabaseError,
        DatabaseUnavailable,
        EventTimeout,
        EventWaitTimeout,
        InvalidPayload,
        InvalidRunState,
        InvalidSchedule,
        KeyUnavailable,
        LeaseExpired,
        LeaseLost,
        MaintenanceBusy,
        NonDeterminismError,
        ObjectStoreError,
        PerdureError,
        PermanentError,
        PermissionDenied,
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
        UndecodablePayload,
        UnknownStep,
        UnknownWorkflow,
        UpdateFailed,
        UpdateRejected,
        UpdateTimeout,
        WorkflowDefinitionError,
    )
    from perdure.steps import Snooze, StepCall, StepContext
    from perdure.types import (
        BulkResult,
        EmittedEvent,
        EventToEmit,
        EventTrigger,
        HistoryEvent,
        PruneResult,
        Run,
        RunPage,
        RunRef,
        RunStatus,
        ScheduleInfo,
        Step,
        StepStatus,
        Winner,
    )

__version__ = "0.1.0"

#: Where each public name lives: imported on first use, so that a program
#: (the ``perdure`` command among them) that needs a few pays for only those.
_HOMES: dict[str, str] = {
    "App": "perdure.api.app",
    "BlockingCallInEventLoop": "perdure.errors",
    "BulkResult": "perdure.types",
    "Cancelled": "perdure.errors",
    "ChildFailed": "perdure.errors",
    "ChildRun": "perdure.api.context",
    "Clock": "perdure.clock",
    "ConfigurationError": "perdure.errors",
    "Context": "perdure.api.context",
    "DatabaseError": "perdure.errors",
    "DatabaseUnavailable": "perdure.errors",
    "EmittedEvent": "perdure.types",
    "Winner": "perdure.types",
    "EventTimeout": "perdure.errors",
    "EventToEmit": "perdure.types",
    "EventTrigger": "perdure.types",
    "EventWaitTimeout": "perdure.errors",
    "Graph": "perdure.api.graph",
    "GraphStep": "perdure.api.graph",
    "HistoryEvent": "perdure.types",
    "InvalidPayload": "perdure.errors",
    "InvalidRunState": "perdure.errors",
    "InvalidSchedule": "perdure.errors",
    "KeyUnavailable": "perdure.errors",
    "LeaseExpired": "perdure.errors",
    "LeaseLost": "perdure.errors",
    "MaintenanceBusy": "perdure.errors",
    "NonDeterminismError": "perdure.errors",
    "ObjectStoreError": "perdure.errors",
    "PermissionDenied": "perdure.errors",
    "PerdureError": "perdure.errors",
    "PermanentError": "perdure.errors",
    "PruneResult": "perdure.types",
    "ResultTimeout": "perdure.errors",
    "RetryPolicy": "perdure.engine.retry",
    "Run": "perdure.types",
    "RunCancelled": "perdure.errors",
    "RunFailed": "perdure.errors",
    "RunFilter": "perdure.api.filters",
    "RunHandle": "perdure.api.handle",
    "RunKeyConflict": "perdure.errors",
    "RunNotFound": "perdure.errors",
    "RunPage": "perdure.types",
    "RunRef": "perdure.types",
    "RunStatus": "perdure.types",
    "ScheduleInfo": "perdure.types",
    "ScheduleNotFound": "perdure.errors",
    "SchemaError": "perdure.errors",
    "SerializationError": "perdure.errors",
    "SignalTimeout": "perdure.errors",
    "UpdateFailed": "perdure.errors",
    "UpdateRejected": "perdure.errors",
    "UpdateTimeout": "perdure.errors",
    "Snooze": "perdure.steps",
    "Step": "perdure.types",
    "StepCall": "perdure.steps",
    "StepContext": "perdure.steps",
    "StepFailed": "perdure.errors",
    "StepStatus": "perdure.types",
    "StepTimeout": "perdure.errors",
    "SyncChildRun": "perdure.api.context",
    "SyncContext": "perdure.api.context",
    "UndecodablePayload": "perdure.errors",
    "UnknownStep": "perdure.errors",
    "UnknownWorkflow": "perdure.errors",
    "VirtualClock": "perdure.clock",
    "Worker": "perdure.engine.worker",
    "WorkerOptions": "perdure.engine.options",
    "WorkflowDefinitionError": "perdure.errors",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'perdure' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted([*globals(), *_HOMES])


__all__ = [
    "App",
    "BlockingCallInEventLoop",
    "BulkResult",
    "Cancelled",
    "ChildFailed",
    "ChildRun",
    "Clock",
    "ConfigurationError",
    "Context",
    "DatabaseError",
    "DatabaseUnavailable",
    "EmittedEvent",
    "EventTimeout",
    "EventToEmit",
    "EventTrigger",
    "EventWaitTimeout",
    "Graph",
    "GraphStep",
    "HistoryEvent",
    "InvalidPayload",
    "InvalidRunState",
    "InvalidSchedule",
    "KeyUnavailable",
    "LeaseExpired",
    "LeaseLost",
    "MaintenanceBusy",
    "NonDeterminismError",
    "ObjectStoreError",
    "PerdureError",
    "PermanentError",
    "PermissionDenied",
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
    "UndecodablePayload",
    "UnknownStep",
    "UnknownWorkflow",
    "UpdateFailed",
    "UpdateRejected",
    "UpdateTimeout",
    "VirtualClock",
    "Winner",
    "Worker",
    "WorkerOptions",
    "WorkflowDefinitionError",
]
