"""Checking what a wait or a trigger on an emitted event matches: ``event_match``, ``triggers``.

A match is a JSON object that an event's payload must contain
(``payload @> match`` in PostgreSQL); a trigger is an event name and a match.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import ConfigurationError
from perdure.types import EventTrigger

#: The most events one batch holds, and its longest window in seconds.
MAX_BATCH = 10_000
MAX_WINDOW = 86_400.0


def event_match(name: str, match: object, max_bytes: int) -> dict[str, Any]:
    """``match`` as the JSON object a wait or trigger on event ``name`` compares
    payloads with ({} for None), or ConfigurationError / SerializationError."""
    if match is None:
        return {}
    if not isinstance(match, dict):
        raise ConfigurationError(
            f"the match of event {name!r} must be a dict (a JSON object), not {match!r}"
        )
    loaded: dict[str, Any] = json.loads(
        serialization.dumps(match, f"the match of event {name!r}", max_bytes)
    )
    return loaded


def triggers(
    workflow: str, on_event: str | EventTrigger | Sequence[str | EventTrigger] | None
) -> tuple[EventTrigger, ...]:
    """The triggers ``on_event`` declares for ``workflow``, checked (an event name
    alone matches every event of that name)."""
    if on_event is None:
        return ()
    if isinstance(on_event, str | EventTrigger):
        given: list[object] = [on_event]
    elif isinstance(on_event, list | tuple):
        given = list(on_event)
    else:
        given = [on_event]
    found: list[EventTrigger] = []
    for item in given:
        if isinstance(item, str):
            item = EventTrigger(item)
        if not isinstance(item, EventTrigger) or not isinstance(item.name, str):
            raise ConfigurationError(
                f"workflow {workflow!r}: on_event takes event names or EventTrigger, not {item!r}"
            )
        validate_name("event", item.name)
        size, window = _batching(workflow, item)
        found.append(
            EventTrigger(item.name, event_match(item.name, item.match, 1 << 20), size, window)
        )
    if len({(t.batch_size, t.batch_window) for t in found}) > 1:
        raise ConfigurationError(
            f"workflow {workflow!r}: its event triggers must all batch alike (the same "
            "batch_size and batch_window) or none batch: a run's input is either one "
            "event's payload or a list of events"
        )
    return tuple(found)


def _batching(workflow: str, trigger: EventTrigger) -> tuple[int | None, float | None]:
    """The trigger's batch size and window in seconds, checked (both None: no batches)."""
    if not trigger.batched:
        return None, None
    what = f"workflow {workflow!r}: the trigger on {trigger.name!r}"
    if trigger.batch_size is None or trigger.batch_window is None:
        raise ConfigurationError(
            f"{what} needs both batch_size and batch_window: a batch starts its run when it "
            "holds batch_size events or when batch_window has passed since its first"
        )
    size = arguments.integer(
        f"{what}: batch_size", trigger.batch_size, minimum=1, maximum=MAX_BATCH
    )
    window = arguments.seconds(f"{what}: batch_window", trigger.batch_window, positive=True)
    if window > MAX_WINDOW:
        raise ConfigurationError(
            f"{what}: batch_window must be at most {MAX_WINDOW:.0f} seconds (a day), "
            f"not {trigger.batch_window!r}"
        )
    return size, window
