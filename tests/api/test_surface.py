"""The public surface has a sync and an async form of every I/O call, with one signature.

Enumerates App, RunHandle, Context/SyncContext and ChildRun/SyncChildRun and
fails when a form is missing or the two forms' signatures differ
(parameters, defaults, annotations; the return modulo the awaitable), or when
a form is written by hand instead of derived from its one operation (the
derivation marks each form with the operation it is made of).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import perdure

#: App members without I/O (declarations, configuration): one form only.
APP_WITHOUT_IO = {"workflow", "graph", "queue", "schedule", "configure", "update_handler"}
#: Return annotations of the blocking form that stand for the async form's.
BLOCKING_RETURNS = {
    "StepCall[T]": "T",
    "StepCall[Any]": "Any",
    "ChildRun": "SyncChildRun",
    "AsyncIterator[Any]": "Iterator[Any]",
}


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member) and not isinstance(member, type)
    }


def _parameters(fn: Any) -> list[tuple[str, Any, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]


def _returns(fn: Any) -> str:
    annotation = inspect.signature(fn).return_annotation
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def _pairs(cls: type, skip: set[str]) -> list[tuple[str, str]]:
    members = _public(cls)
    return [
        (n, f"{n}_async") for n in sorted(members) if not n.endswith("_async") and n not in skip
    ]


def _derived_from(form: Any) -> Any:
    """The operation a derived form is made of (None for a hand-written one)."""
    return getattr(form, "__perdure_derived_from__", None)


def _assert_same_return(awaiting: Any, blocking: Any) -> None:
    """The blocking form returns what the async form awaits (a derived form names the same)."""
    returned = _returns(awaiting)
    assert _returns(blocking) in {returned, BLOCKING_RETURNS.get(returned)}


APP_PAIRS = _pairs(perdure.App, APP_WITHOUT_IO)
HANDLE_PAIRS = _pairs(perdure.RunHandle, set())


def test_the_app_surface_is_enumerated() -> None:
    names = {sync for sync, _ in APP_PAIRS}
    # Calls that had no async form before: each must now be in the table.
    assert {
        "add_schedule",
        "count_runs",
        "events",
        "get_schedule",
        "handle",
        "history",
        "pause_schedule",
        "register",
        "remove_schedule",
        "resume_schedule",
        "schedules",
        "set_queue",
        "signals",
        "steps",
        "tick_schedules",
        "trigger_schedule",
        "upcoming_ticks",
        "workers",
        "workflows",
    } <= names
    assert len(APP_PAIRS) >= 42


@pytest.mark.parametrize(
    ("cls", "sync", "async_"),
    [
        *[(perdure.App, s, a) for s, a in APP_PAIRS],
        *[(perdure.RunHandle, s, a) for s, a in HANDLE_PAIRS],
    ],
)
def test_every_call_has_both_forms_with_one_signature(cls: type, sync: str, async_: str) -> None:
    assert hasattr(cls, async_), f"{cls.__name__}.{sync} has no async form {async_}"
    blocking, awaiting = getattr(cls, sync), getattr(cls, async_)
    assert not inspect.iscoroutinefunction(blocking), f"{cls.__name__}.{sync} is not blocking"
    assert inspect.iscoroutinefunction(awaiting) or inspect.isasyncgenfunction(awaiting), (
        f"{cls.__name__}.{async_} is not awaitable"
    )
    assert _parameters(blocking) == _parameters(awaiting)
    _assert_same_return(awaiting, blocking)
    assert blocking.__doc__ and blocking.__doc__ == awaiting.__doc__
    # Both forms are derived from one operation, neither is written by hand.
    operation = _derived_from(blocking)
    assert operation is not None, f"{cls.__name__}.{sync} is written by hand"
    assert _derived_from(awaiting) is operation, f"{cls.__name__}.{async_} is written by hand"
    assert inspect.iscoroutinefunction(operation) or inspect.isasyncgenfunction(operation)


def test_every_async_form_has_a_sync_form() -> None:
    for cls in (perdure.App, perdure.RunHandle):
        for name in _public(cls):
            if name.endswith("_async"):
                assert hasattr(cls, name.removesuffix("_async")), f"{cls.__name__}.{name}"


CONTEXT_METHODS = sorted(set(_public(perdure.Context)))


@pytest.mark.parametrize("name", CONTEXT_METHODS)
def test_sync_context_has_every_context_method_with_its_signature(name: str) -> None:
    awaiting = getattr(perdure.Context, name)
    blocking = getattr(perdure.SyncContext, name, None)
    assert blocking is not None, f"SyncContext has no {name}"
    assert not inspect.iscoroutinefunction(blocking)
    assert _parameters(blocking) == _parameters(awaiting)
    _assert_same_return(awaiting, blocking)
    if blocking is not awaiting:  # a method without I/O is shared (branch, on_rollback)
        assert _derived_from(blocking) is awaiting, f"SyncContext.{name} is written by hand"


def test_sync_context_adds_nothing_of_its_own() -> None:
    assert set(_public(perdure.SyncContext)) == set(CONTEXT_METHODS)


def test_a_child_run_has_both_forms() -> None:
    assert inspect.iscoroutinefunction(perdure.ChildRun.result)
    assert not inspect.iscoroutinefunction(perdure.SyncChildRun.result)
    assert _parameters(perdure.ChildRun.result) == _parameters(perdure.SyncChildRun.result)
    assert _derived_from(perdure.SyncChildRun.result) is perdure.ChildRun.result


def test_a_hand_written_form_is_told_from_a_derived_one() -> None:
    class Written:
        def start(self) -> None:
            """Written by hand."""

    assert _derived_from(Written.start) is None
    assert _derived_from(perdure.App.start) is not None
