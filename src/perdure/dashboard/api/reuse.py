"""An idempotency key reused for a different request: refused (409 ``idempotency-key-reused``).

A key makes a start or a signal idempotent: the same request sent again is
answered with the run or signal the first one made. A key sent again with
another request (another input, another signal name or payload) is a
client's mistake, not a repeat: the stored run or signal is compared with
the new request and a difference is refused rather than silently ignored.
Nothing is written by a refused request: the key's run or signal was found,
not made.
"""

from __future__ import annotations

import json
from typing import Any

from perdure.api.app import App
from perdure.dashboard.api.problems import Problem
from perdure.engine import serialization
from perdure.types import Run

CODE = "idempotency-key-reused"


def same_json(a: Any, b: Any) -> bool:
    """Whether two decoded JSON values are equal as JSON: numbers by value, booleans apart."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def stored_form(app: App, run: Run, value: Any) -> Any:
    """``value`` as a start of ``run``'s workflow would store it (typed inputs rebuilt)."""
    local = app.registry.get(run.workflow, run.version)
    if local is not None:
        value = local.check_input(value)
    return json.loads(serialization.dumps(value, "the input", app.max_payload_bytes))


def check_start(app: App, run: Run, key: str, input: Any) -> None:
    """409 when ``run``, found by ``key``, was started with another input."""
    if run.key == key and not same_json(run.input, stored_form(app, run, input)):
        raise Problem(
            409,
            CODE,
            f"key {key!r} already started run {run.id} with another input; "
            "send the same request again, or use another key",
        )


async def check_signal(
    app: App, run: str, signal_id: int, key: str, name: str, payload: Any
) -> None:
    """409 when the signal ``key`` named (``signal_id``) has another name or payload."""
    for sent in await app.signals_async(run, signal_id=signal_id):
        if sent["name"] != name:
            detail = f"signal key {key!r} was already sent as signal {sent['name']!r}"
        elif not same_json(sent["payload"], _decoded(payload)):
            detail = f"signal key {key!r} was already sent with another payload"
        else:
            return
        raise Problem(409, CODE, f"{detail}; send the same request again, or use another key")


def _decoded(payload: Any) -> Any:
    return json.loads(serialization.dumps(payload, "the payload", serialization.MAX_PAYLOAD_LIMIT))
