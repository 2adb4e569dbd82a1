"""Emitting application events and reading them back: ``app.emit``, ``app.emitted_events``.

An emitted event (vocabulary: *event*) is a named fact with a JSON payload,
recorded once per name and key. Emitting it wakes the runs parked at a
``ctx.wait_for_event`` it matches and starts the workflows whose trigger it
matches, in the same transaction: on the App's pool, or with ``conn=`` in the
caller's own transaction (the transactional outbox: rolled back, the event
never happened). Not ``app.get_event``/``app.events``, which read the values
a run published with ``ctx.set_event``.
"""

from __future__ import annotations

from typing import Any

from perdure.api import starting
from perdure.api.core import Core
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.store import caller
from perdure.types import EmittedEvent


async def emit(
    core: Core,
    name: str,
    payload: Any = None,
    *,
    key: str | None = None,
    conn: caller.Connection | caller.AsyncConnection | None = None,
) -> int:
    """Record event ``name`` with ``payload`` (a JSON value; None: ``{}``); its id.

    Every run parked at a ``ctx.wait_for_event(name, match)`` whose match the
    payload contains takes it and is made due, and every workflow with a
    matching ``on_event`` trigger gets one run, in the same transaction.
    Emitting again with the same ``key`` (per name) records, wakes and starts
    nothing and returns the first event's id. With ``conn`` (a psycopg
    connection in a transaction: a ``Connection``, or an ``AsyncConnection``
    from ``emit_async``) the event is written in the caller's transaction and
    exists, wakes and starts only if that commits: the transactional outbox.
    A bad name, key or payload is refused before anything is written.
    """
    event_id, _ = await _record(core, name, payload, key, conn)
    return event_id


async def emit_recorded(
    core: Core, name: str, payload: Any = None, *, key: str | None = None
) -> tuple[int, bool]:
    """As ``emit`` on the App's pool; the event's id and whether this call recorded it.

    ``False`` means the key (per name) named an event emitted before: nothing
    was recorded, woken or started, and the id is that first event's (the
    HTTP API answers 200 rather than 201 then).
    """
    return await _record(core, name, payload, key, None)


async def _record(
    core: Core,
    name: str,
    payload: Any,
    key: str | None,
    conn: caller.Connection | caller.AsyncConnection | None,
) -> tuple[int, bool]:
    validate_name("event", name)
    key = arguments.optional_text("event key", key, max_length=arguments.MAX_KEY_LENGTH)
    text = serialization.dumps(
        {} if payload is None else payload, f"the payload of event {name!r}", core.max_payload_bytes
    )
    statement = core.statements.emissions.emit(name, text, key, core.max_payload_bytes)
    run = core.run if conn is None else starting.on_connection(core, conn, "emit")
    row = await run(statement)
    return int(row["id"]), bool(row["created"])


async def emitted_events(
    core: Core, name: str | None = None, *, limit: int = 50
) -> list[dict[str, Any]]:
    """The latest emitted events (of ``name`` only, if given), newest first.

    Each is a dict: the ``event`` (an [`EmittedEvent`][perdure.EmittedEvent]),
    and the ids of the runs it ``woke`` (by a wait) and ``started`` (by a trigger).
    """
    if name is not None:
        validate_name("event", name)
    limit = arguments.integer("limit", limit, minimum=1, maximum=10_000)
    rows = await core.read(core.statements.emissions.recent(name, limit))
    return [
        {"event": EmittedEvent.from_record(row), "woke": row["woke"], "started": row["started"]}
        for row in rows
    ]
