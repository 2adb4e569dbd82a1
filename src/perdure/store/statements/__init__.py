"""Typed statements over the named queries: the store's whole vocabulary.

``Statements`` holds one namespace per entity, each building the
statements of ``sql/queries/<entity>.sql``: ``statements.runs.insert(...)``
gives a ``Statement`` (the rendered query, its
parameters with the clock's ``now``, and a decoder for its rows). Nothing here
does I/O, so one statement runs on the worker's async pool or on a caller's
async or sync connection.
"""

from __future__ import annotations

import re

from psycopg import sql

from perdure.clock import Clock
from perdure.errors import ConfigurationError
from perdure.store.codec import PLAIN, Payloads
from perdure.store.queries import render
from perdure.store.statement import Builder
from perdure.store.statements.audits import AuditStatements
from perdure.store.statements.demos import DemoStatements
from perdure.store.statements.emissions import EmissionStatements
from perdure.store.statements.events import EventStatements, StreamStatements
from perdure.store.statements.history import HistoryStatements
from perdure.store.statements.queues import QueueStatements
from perdure.store.statements.races import RaceStatements
from perdure.store.statements.runs import RunStatements
from perdure.store.statements.schedules import ScheduleStatements
from perdure.store.statements.signals import SignalStatements
from perdure.store.statements.steplogs import StepLogStatements
from perdure.store.statements.steps import StepStatements
from perdure.store.statements.tasks import TaskStatements
from perdure.store.statements.updates import UpdateStatements
from perdure.store.statements.workers import WorkerStatements
from perdure.store.statements.workflows import WorkflowStatements

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")


def validate_schema(name: object) -> str:
    """Return ``name`` if it is a usable schema name, else raise ConfigurationError.

    Lower-case identifiers only, at most 48 characters, so that the schema
    needs no quoting in psql and its notification channel name stays under
    PostgreSQL's 63-byte identifier limit.
    """
    # fullmatch: a '$' anchor would let a trailing newline through.
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise ConfigurationError(
            f"invalid schema name {name!r}: use 1-48 lower-case letters, digits or "
            "underscores, starting with a letter or underscore"
        )
    return name


class Statements:
    """Every statement perdure issues, for one schema and one clock, by entity."""

    def __init__(self, schema: str, clock: Clock, payloads: Payloads = PLAIN) -> None:
        """Render the named queries for ``schema``; take times from ``clock``; pass every
        payload through ``payloads`` (store/codec.py)."""
        self.schema = validate_schema(schema)
        self.clock = clock
        self.payloads = payloads
        build = Builder(
            self.schema, clock, render(sql.Identifier(schema).as_string(None)), payloads
        )
        self.channel = build.channel
        self.runs = RunStatements(build)
        self.steps = StepStatements(build)
        self.steplogs = StepLogStatements(build)
        self.tasks = TaskStatements(build)
        self.signals = SignalStatements(build)
        self.updates = UpdateStatements(build)
        self.events = EventStatements(build)
        self.streams = StreamStatements(build)
        #: Emitted events (app.emit), their waits and triggers; not ``events``.
        self.emissions = EmissionStatements(build)
        #: Races of waits (ctx.wait_first): their members' signals, events and filings.
        self.races = RaceStatements(build)
        self.queues = QueueStatements(build)
        self.schedules = ScheduleStatements(build)
        self.workers = WorkerStatements(build)
        self.workflows = WorkflowStatements(build)
        self.history = HistoryStatements(build)
        self.audits = AuditStatements(build)
        #: The tables and evidence of ``perdure demo`` (``sql/queries/demos.sql``).
        self.demos = DemoStatements(build)

    @property
    def messages_channel(self) -> str:
        """Where the events and streams tables' triggers say which run published."""
        return f"{self.schema}_messages"
