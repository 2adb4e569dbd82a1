"""The statements on emitted events, their waits and triggers: ``sql/queries/emissions.sql``.

An emitted event (``app.emit``) is not a run's published event (``ctx.set_event``,
``statements.events``): see the glossary in docs/architecture.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Namespace, Row, Statement, all_rows, count, first
from perdure.types import EventTrigger


def _none(found: list[Row]) -> None:
    return None


def _queues(found: list[Row]) -> list[str]:
    """The queues listed in the first row's ``queues`` (each followed by a newline)."""
    listed = str(found[0]["queues"]) if found else ""
    return [queue for queue in listed.split("\n") if queue]


def _seconds(window: float | timedelta) -> float:
    return window.total_seconds() if isinstance(window, timedelta) else float(window)


class EmissionStatements(Namespace):
    """The statements on emitted events: ``statements.emissions``."""

    def emit(self, name: str, payload_json: str, key: str | None, max_bytes: int) -> Statement[Row]:
        """Record event ``name`` (once per key), wake its waits, start its triggers' runs:
        the event's ``id``, ``created``, and how many runs it ``woke`` and ``started``."""

        def decode(found: list[Row]) -> Row:
            return found[0]

        return self._build(
            "emission_emit",
            decode,
            name=name,
            payload=payload_json,
            key=key,
            max_bytes=max_bytes,
        )

    def emit_many(self, events_json: str, max_bytes: int, max_events: int) -> Statement[list[Row]]:
        """Record the events of the JSON array ``events_json`` (objects with ``name``,
        ``payload``, ``key``) in order, all or none: one row per element, its ``index``
        from 0, ``id``, ``created``, ``woke`` and ``started``."""
        return self._build(
            "emission_emit_many",
            all_rows,
            events=events_json,
            max_bytes=max_bytes,
            max_events=max_events,
        )

    def emit_deferring(
        self, name: str, payload_json: str, key: str | None, max_bytes: int
    ) -> Statement[tuple[Row, list[str]]]:
        """As ``emit``, its wake-up notifications deferred: the event's row and the
        queues to notify after the commit (one statement: run it in a transaction
        of its own)."""

        def decode(found: list[Row]) -> tuple[Row, list[str]]:
            return found[0], _queues(found)

        return self._build(
            "emission_emit_deferring",
            decode,
            name=name,
            payload=payload_json,
            key=key,
            max_bytes=max_bytes,
        )

    def emit_many_deferring(
        self, events_json: str, max_bytes: int, max_events: int
    ) -> Statement[tuple[list[Row], list[str]]]:
        """As ``emit_many``, its wake-up notifications deferred: the rows and the
        queues to notify after the commit (one statement: run it in a transaction
        of its own)."""

        def decode(found: list[Row]) -> tuple[list[Row], list[str]]:
            return found, _queues(found)

        return self._build(
            "emission_emit_many_deferring",
            decode,
            events=events_json,
            max_bytes=max_bytes,
            max_events=max_events,
        )

    def defer_wakeups(self) -> Statement[None]:
        """For the rest of this transaction, list the queues to notify instead of
        notifying them (read them with ``deferred_wakeups``)."""
        return self._build("emission_defer_wakeups", _none)

    def deferred_wakeups(self) -> Statement[list[str]]:
        """The queues this transaction made work ready on, since ``defer_wakeups``."""

        def decode(found: list[Row]) -> list[str]:
            listed = str(found[0]["queues"]) if found else ""
            return [queue for queue in listed.split("\n") if queue]

        return self._build("emission_deferred_wakeups", decode)

    def wake(self, queues: Sequence[str]) -> Statement[int]:
        """Notify the workers of ``queues`` on the wakeup channel; how many notified."""
        return self._build(
            "emission_wake",
            count("notified"),
            channel=self._build.channel,
            queues=json.dumps(list(queues)),
        )

    def lock(self, name: str) -> Statement[None]:
        """The wait's exclusive lock on event name ``name``, to the end of the transaction."""
        return self._build("emission_lock", _none, name=name)

    def take(
        self,
        fence: Fence,
        *,
        position: int,
        step_name: str,
        name: str,
        match: dict[str, Any],
        since: datetime | None,
        lookback: float,
    ) -> Statement[Fenced]:
        """The event for the wait at ``position``: delivered already, or taken now
        (``written``, the event record as ``payload``), with the statement's time."""
        return self._build(
            "emission_take",
            Fenced.decode,
            position=position,
            step_name=step_name,
            name=name,
            match=json.dumps(match),
            since=since,
            lookback=lookback,
            **fence.params(),
        )

    def park(
        self,
        fence: Fence,
        *,
        position: int,
        name: str,
        match: dict[str, Any],
        since: datetime | None,
        lookback: float,
    ) -> Statement[None]:
        """File the wait at ``position`` for emitters of ``name`` to find."""
        return self._build(
            "emission_park",
            _none,
            position=position,
            name=name,
            match=json.dumps(match),
            since=since,
            lookback=lookback,
            **fence.params(),
        )

    def unpark(self, run_id: str, position: int) -> Statement[None]:
        """Remove the filed wait at ``position`` of run ``run_id`` (it timed out)."""
        return self._build("emission_unpark", _none, run_id=run_id, position=position)

    def recent(self, name: str | None = None, limit: int = 50) -> Statement[list[Row]]:
        """The latest events, newest first, with the runs each ``woke`` and ``started``."""
        return self._build("emission_list", all_rows, name=name, limit=limit)

    def counts(self, seconds: float) -> Statement[Row | None]:
        """How many events were ``emitted`` in the last ``seconds``, and how many of them
        ``matched`` (woke or started) a run."""
        return self._build("emission_counts", first(dict), seconds=seconds)

    def prune(self, cutoff: datetime, limit: int) -> Statement[int]:
        """Delete up to ``limit`` events emitted before ``cutoff``; how many."""
        return self._build("emission_prune", count("pruned"), cutoff=cutoff, limit=limit)

    def set_triggers(self, workflow: str, triggers: Sequence[EventTrigger]) -> Statement[None]:
        """Make ``triggers`` (checked: a batched one's window in seconds) the ones that
        start ``workflow``."""
        return self._build(
            "emission_triggers_set",
            _none,
            workflow=workflow,
            names=[t.name for t in triggers],
            matches=[json.dumps(t.match) for t in triggers],
            batch_sizes=[t.batch_size for t in triggers],
            batch_windows=[
                None if t.batch_window is None else _seconds(t.batch_window) for t in triggers
            ],
        )

    def triggers(self) -> Statement[list[Row]]:
        """Every event trigger: workflow, event name, match, batch_size, batch_window."""
        return self._build("emission_triggers_list", all_rows)
