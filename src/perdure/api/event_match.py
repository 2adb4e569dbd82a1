"""Checking what a wait or a trigger on an emitted event matches: ``event_match``, ``triggers``.

A match is a JSON object that an event's payload must contain
(``payload @> match`` in PostgreSQL); a trigger is an event name and a match.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perdure.engine import serialization
from perdure.engine.arguments import validate_name
from perdure.errors import ConfigurationError
from perdure.types import EventTrigger


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
        found.append(EventTrigger(item.name, event_match(item.name, item.match, 1 << 20)))
    return tuple(found)
