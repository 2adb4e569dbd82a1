"""What a role without payloads (``viewer-no-payloads``) sees of a run: no user data.

Inputs, outputs, step results, signal payloads, event values, history
details, step logs and error messages and tracebacks are replaced by
``HIDDEN``; names, statuses, times, workers and error types stay.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from perdure.types import HistoryEvent, Run, Step

#: What stands in for a hidden value.
HIDDEN = "(hidden: this role sees no payloads)"


def error(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error's type only: its message, traceback and fields may quote user data."""
    if value is None:
        return None
    return {"type": value.get("type") or "Error", "message": HIDDEN}


def run(value: Run) -> Run:
    """The run without its input, output and error details."""
    return dataclasses.replace(
        value,
        input=HIDDEN,
        output=None if value.output is None else HIDDEN,
        error=error(value.error),
    )


def step(value: Step) -> Step:
    """The step without its output and error details."""
    return dataclasses.replace(
        value,
        output=None if value.output is None else HIDDEN,
        error=error(value.error),
    )


def history(value: HistoryEvent) -> HistoryEvent:
    """The history entry without its detail."""
    return dataclasses.replace(value, detail=None if value.detail is None else {"detail": HIDDEN})


def entries(values: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Signals or events with their ``field`` (payload, value) hidden."""
    return [{**v, field: HIDDEN} for v in values]


def updates(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Updates without their payload, reply and error details (a refusal's or a
    handler's message may quote the request)."""
    return [
        {
            **v,
            "payload": HIDDEN,
            "result": None if v.get("result") is None else HIDDEN,
            "error": error(v["error"]) if isinstance(v.get("error"), dict) else None,
        }
        for v in values
    ]
