"""Emitting application events and reading them back: ``app.emit``, ``app.emitted_events``.

An emitted event (vocabulary: *event*) is a named fact with a JSON payload,
recorded once per name and key. Emitting it wakes the runs parked at a
``ctx.wait_for_event`` it matches and starts the workflows whose trigger it
matches, in the same transaction: on the App's pool, or with ``conn=`` in the
caller's own transaction (the transactional outbox: rolled back, the event
never happened). ``app.emit_many`` does the same for a list of events in
one transaction. On the App's pool the workers are notified after the
commit, not in it (see ``_committed_then_woken``). Not
``app.get_event``/``app.events``, which read the values a run published
with ``ctx.set_event``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from perdure.api import starting
from perdure.api.core import Core
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import ConfigurationError, DatabaseError, PerdureError, WorkflowDefinitionError
from perdure.store import caller
from perdure.store.statement import Statement
from perdure.types import EmittedEvent, EventToEmit

T = TypeVar("T")

log = logging.getLogger("perdure.emit")

#: The most events one ``emit_many`` call takes (``emit_events`` in SQL too).
MAX_EVENTS_PER_CALL = 10_000

#: How often ``emit_many`` tries again when PostgreSQL broke a deadlock with it:
#: concurrent calls whose events reach the same waits in different orders.
DEADLOCK_TRIES = 5


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
    Without ``conn`` the workers are notified just after the commit; should
    the emitter die in between, they find the runs at their fallback poll.
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
    emissions = core.statements.emissions
    if conn is not None:
        statement = emissions.emit(name, text, key, core.max_payload_bytes)
        row = await starting.on_connection(core, conn, "emit")(statement)
    else:
        deferring = emissions.emit_deferring(name, text, key, core.max_payload_bytes)
        row = await _committed_then_woken(core, deferring)
    return int(row["id"]), bool(row["created"])


async def _committed_then_woken(core: Core, statement: Statement[tuple[T, list[str]]]) -> T:
    """Run the deferring emit ``statement`` (``emit_deferring``, ``emit_many_deferring``)
    in a transaction of its own on the App's pool; notify the queues it made work
    ready on after its commit, not in it.

    PostgreSQL commits notifying transactions one at a time, each through its
    WAL flush: emitters that notify in their transaction wait for each other.
    The notification's own transaction writes nothing else and waits for no
    flush. Were it lost (the process dies between the two, the connection
    drops), the workers' fallback poll finds the runs made due. Returns the
    statement's answer.
    """
    store = await core.get_store()
    found, queues = await store.execute(statement)
    if queues:
        try:
            await store.execute(core.statements.emissions.wake(queues))
        except PerdureError as exc:
            log.warning(
                "events committed; their wake-up notification failed (%s): "
                "the workers' poll finds the runs",
                exc,
            )
    return found


def _item(index: int, item: object) -> EventToEmit:
    """``item`` of an ``emit_many`` call as an ``EventToEmit``: one already, or a
    tuple ``(name, payload, key)`` (payload and key optional)."""
    if isinstance(item, EventToEmit):
        return item
    if isinstance(item, tuple) and 1 <= len(item) <= 3:
        return EventToEmit(*item)
    raise ConfigurationError(
        f"event {index} of emit_many: each event is a perdure.EventToEmit or a tuple "
        f"(name, payload, key), not {type(item).__name__}"
    )


def _checked(core: Core, events: Sequence[EventToEmit | tuple[Any, ...]]) -> str:
    """The JSON array of ``events`` for ``emit_events``, each checked as ``emit``
    checks one; a bad one is refused naming its index, before anything is written."""
    if isinstance(events, str | bytes) or not isinstance(events, Sequence):
        raise ConfigurationError(f"emit_many takes a list of events, not {type(events).__name__}")
    if len(events) > MAX_EVENTS_PER_CALL:
        raise ConfigurationError(
            f"{len(events)} events in one emit_many call: at most {MAX_EVENTS_PER_CALL}"
        )
    items: list[str] = []
    for index, raw in enumerate(events):
        event = _item(index, raw)
        try:
            validate_name("event", event.name)
            key = arguments.optional_text(
                "event key", event.key, max_length=arguments.MAX_KEY_LENGTH
            )
        except (WorkflowDefinitionError, ConfigurationError) as exc:
            raise type(exc)(f"event {index} of emit_many: {exc}") from None
        payload = serialization.dumps(
            {} if event.payload is None else event.payload,
            f"the payload of event {index} ({event.name!r})",
            core.max_payload_bytes,
        )
        items.append(
            f'{{"name":{json.dumps(event.name)},"key":{json.dumps(key)},"payload":{payload}}}'
        )
    return "[" + ",".join(items) + "]"


async def emit_many(
    core: Core,
    events: Sequence[EventToEmit | tuple[Any, ...]],
    *,
    conn: caller.Connection | caller.AsyncConnection | None = None,
) -> list[int]:
    """Emit ``events`` in one transaction, all or none; their ids, in order.

    Each event is a ``perdure.EventToEmit(name, payload, key)`` or a tuple
    ``(name, payload, key)`` (payload and key optional) and is recorded,
    matched, delivered and counted by triggers and batches exactly as
    ``emit`` records one, in the list's order. A key already emitted (per
    name), before or earlier in the same list, records nothing more and
    answers the first event's id. A bad event anywhere (name, key, payload,
    or not an event) is refused naming its index, and nothing is written.
    The workers are notified once per queue for the whole call. With
    ``conn``, the events are written in the caller's transaction (the
    transactional outbox), as ``emit`` does. At most 10,000 events a call.
    """
    return [event_id for event_id, _ in await emit_many_recorded(core, events, conn=conn)]


async def emit_many_recorded(
    core: Core,
    events: Sequence[EventToEmit | tuple[Any, ...]],
    *,
    conn: caller.Connection | caller.AsyncConnection | None = None,
) -> list[tuple[int, bool]]:
    """As ``emit_many``; each event's id and whether this call recorded it
    (``False``: its key named an event emitted before, or earlier in the list)."""
    text = _checked(core, events)
    if not text.strip("[]"):
        return []
    emissions = core.statements.emissions
    if conn is not None:
        statement = emissions.emit_many(text, core.max_payload_bytes, MAX_EVENTS_PER_CALL)
        rows = await starting.on_connection(core, conn, "emit_many")(statement)
    else:
        deferring = emissions.emit_many_deferring(text, core.max_payload_bytes, MAX_EVENTS_PER_CALL)
        for attempt in range(1, DEADLOCK_TRIES + 1):
            try:
                rows = await _committed_then_woken(core, deferring)
                break
            except DatabaseError as exc:
                # Nothing was written: all or none. Another call held what
                # this one needed while it waited for this one's.
                if exc.sqlstate != "40P01" or attempt == DEADLOCK_TRIES:
                    raise
    return [(int(row["id"]), bool(row["created"])) for row in rows]


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
