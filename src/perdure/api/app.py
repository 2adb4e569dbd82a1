"""App: define workflows, start and inspect runs, run workers.

The App is a flat surface over a ``Core``. Each
operation is written once, as a coroutine in a feature module (starting,
reading, manage, messaging, queues, schedules, retention, registering,
workers); its sync and ``_async`` forms here are derived from it in one line
each (``perdure.api.forms``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from perdure.api import (
    auditing,
    core,
    draining,
    emitting,
    event_match,
    forms,
    manage,
    messaging,
    reading,
    registering,
    retention,
    starting,
    stranding,
    updating,
)
from perdure.api import queues as queueing
from perdure.api import schedules as scheduling
from perdure.api import workers as working
from perdure.api.core import Core
from perdure.api.graph import Graph
from perdure.api.presenting import owned
from perdure.api.registry import DEFAULT_MAX_LAPSES, Registry, WorkflowDef
from perdure.api.update_defs import UpdateHandler
from perdure.clock import Clock
from perdure.engine import arguments, serialization
from perdure.engine.retry import DEFAULT_WORKFLOW_RETRY, RetryPolicy, check_policy
from perdure.errors import ConfigurationError, WorkflowDefinitionError
from perdure.store import encryption
from perdure.store.codec import Codec, Payloads
from perdure.store.offload import ObjectStore
from perdure.store.statements import Statements
from perdure.types import EventTrigger

F = TypeVar("F", bound=Callable[..., Any])


@owned
class App:
    """A perdure application: the workflows it defines and the database they run on.

    The database URL comes from ``url``, else ``PERDURE_DATABASE_URL``, else an
    embedded PostgreSQL that perdure starts in a per-user data directory. The
    schema (default ``perdure``, or ``PERDURE_SCHEMA``) is migrated on first use
    unless ``auto_migrate`` is False.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        auto_migrate: bool = True,
        max_payload_bytes: int = serialization.DEFAULT_MAX_PAYLOAD_BYTES,
        pool_size: int = 10,
        direct_url: str | None = None,
        codec: Codec | Sequence[Codec] | None = None,
        compress_above: int | None = None,
        offload: ObjectStore | str | None = None,
        offload_above: int | None = None,
    ) -> None:
        """Create an App; nothing connects until the first call that needs the database.

        Every payload (inputs, outputs, step results, signal, event and stream
        values, step logs, errors) passes through one codec pipeline on its
        way to and from the database (docs/encryption.md): compressed above
        ``compress_above`` bytes (else ``PERDURE_COMPRESS_ABOVE``; off when
        neither is set), then encoded by ``codec`` (one, or a list newest
        last: the last encodes, each decodes), else encrypted with the keys of
        ``PERDURE_ENCRYPTION_KEYS`` or ``PERDURE_ENCRYPTION_KEY_FILE``, which
        always decrypt too. Without either, payloads are stored as plain JSON.
        A sealed payload over ``offload_above`` bytes (else
        ``PERDURE_OFFLOAD_ABOVE``, default 256 KiB) is written to the object
        store ``offload`` (an ObjectStore, ``file:///path`` or
        ``s3://bucket/prefix``; else ``PERDURE_OFFLOAD_URL``; off when
        neither is set) and its row keeps a reference (docs/large-payloads.md).

        ``max_payload_bytes`` (1 KiB to 128 MiB) caps every encoded input, step
        output, signal payload and result; a larger one is refused with
        SerializationError where it enters. ``direct_url`` (else
        ``PERDURE_DIRECT_DATABASE_URL``) is a direct connection to the primary
        when ``url`` goes through a transaction-mode pooler: migrations and
        worker LISTEN and session locks use it (see docs/deploying.md).
        """
        if url is not None and not isinstance(url, str):
            raise ConfigurationError(f"url must be a PostgreSQL URL string, not {url!r}")
        if direct_url is not None and not isinstance(direct_url, str):
            raise ConfigurationError(
                f"direct_url must be a PostgreSQL URL string, not {direct_url!r}"
            )
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigurationError(f"clock must be a perdure Clock, not {clock!r}")
        self._core = Core(
            self,
            url,
            (os.environ.get("PERDURE_SCHEMA") or "perdure") if schema is None else schema,
            clock or Clock(),
            arguments.flag("auto_migrate", auto_migrate),
            arguments.integer(
                "max_payload_bytes",
                max_payload_bytes,
                minimum=1024,
                maximum=serialization.MAX_PAYLOAD_LIMIT,
            ),
            arguments.integer("pool_size", pool_size, minimum=1, maximum=1000),
            direct_url,
            encryption.payloads(
                codec, compress_above, offload=offload, offload_above=offload_above
            ),
        )

    # Configuration ---------------------------------------------------------------

    @property
    def schema(self) -> str:
        """The PostgreSQL schema perdure's tables live in."""
        return self._core.schema

    @property
    def clock(self) -> Clock:
        """The clock the App's statements read the time from."""
        return self._core.clock

    @property
    def auto_migrate(self) -> bool:
        """Whether the schema is migrated on first use."""
        return self._core.auto_migrate

    @auto_migrate.setter
    def auto_migrate(self, value: bool) -> None:
        self._core.auto_migrate = arguments.flag("auto_migrate", value)

    @property
    def max_payload_bytes(self) -> int:
        """The largest encoded input, output, payload or result accepted."""
        return self._core.max_payload_bytes

    @property
    def payloads(self) -> Payloads:
        """The codec pipeline every payload passes through (compression, encryption)."""
        return self._core.payloads

    @property
    def pool_size(self) -> int:
        """The most connections the App's pool opens."""
        return self._core.pool_size

    @property
    def registry(self) -> Registry:
        """The workflow definitions of this App."""
        return self._core.registry

    @property
    def statements(self) -> Statements:
        """The App's named statements (perdure.store)."""
        return self._core.statements

    @property
    def url(self) -> str:
        """The database URL in use, resolving (and starting the embedded server) if needed."""
        return self._core.url

    @property
    def direct_url(self) -> str | None:
        """The direct (unpooled) URL, when the main URL goes through a pooler."""
        return self._core.direct_url

    @property
    def session_url(self) -> str:
        """The URL for migrations and session work: the direct URL, else the main one."""
        return self._core.session_url

    def configure(
        self, *, url: str | None = None, schema: str | None = None, direct_url: str | None = None
    ) -> None:
        """Point the App at another database or schema (before first use; the CLI uses this)."""
        self._core.configure(url, schema, direct_url)

    ensure_schema = forms.blocking(core.ensure_schema)
    ensure_schema_async = forms.awaiting(core.ensure_schema)

    # Definitions -----------------------------------------------------------------

    def workflow(
        self,
        name: str | None = None,
        *,
        version: int = 1,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        max_lapses: int = DEFAULT_MAX_LAPSES,
        on_event: str | EventTrigger | Sequence[str | EventTrigger] | None = None,
    ) -> Callable[[F], F]:
        """Decorate ``def`` or ``async def wf(ctx, input)`` as a durable workflow.

        ``name`` defaults to the function's name and ``queue`` to the workflow's
        name. ``retry`` applies to exceptions raised by the workflow body outside
        its steps (steps have their own policy). ``max_lapses``: after a task of
        a run lost its lease this many times (its workers died or stalled while
        running it), the reaper fails the run (after its compensations), so a
        run that kills every worker cannot cycle forever. It is stored with the
        definition, so every worker applies the same threshold.

        ``on_event`` (an event name, an [`EventTrigger`][perdure.EventTrigger]
        with a match, or a list of them): each emitted event that matches
        starts one run, exactly once, with the event's payload as input and
        the key ``event:<event id>:<workflow>`` (docs/events.md). The
        triggers are recorded when the workflow is registered.
        """
        check_policy("retry", retry)

        def register(fn: F) -> F:
            if not callable(fn):
                raise WorkflowDefinitionError(
                    f"@app.workflow decorates a function, not {type(fn).__name__} {fn!r}"
                )
            wf_name = getattr(fn, "__name__", None) if name is None else name
            self._core.registry.add(
                WorkflowDef(
                    wf_name,  # type: ignore[arg-type]  # checked by WorkflowDef
                    version,
                    wf_name if queue is None else queue,  # type: ignore[arg-type]
                    fn,
                    retry or DEFAULT_WORKFLOW_RETRY,
                    max_lapses=max_lapses,
                    triggers=event_match.triggers(str(wf_name), on_event),
                )
            )
            return fn

        return register

    def update_handler(
        self, workflow: str, name: str | None = None
    ) -> Callable[[Callable[..., Any]], UpdateHandler]:
        """Decorate ``async def handler(ctx, payload)`` as update ``name`` (default: the
        function's name) of workflow ``workflow`` (every version of it).

        The handler runs as part of the run, where it waits (docs/updates.md):
        its ``ctx.step`` calls are checkpointed like the body's, and what it
        returns is the caller's reply. ``@handler.validator`` adds a plain
        ``def validator(payload)``: raising refuses the request before
        anything is recorded.
        """

        def register(fn: Callable[..., Any]) -> UpdateHandler:
            if not callable(fn):
                raise WorkflowDefinitionError(
                    f"@app.update_handler decorates a function, not {type(fn).__name__}"
                )
            handler = UpdateHandler(
                workflow,
                getattr(fn, "__name__", "") if name is None else name,
                fn,
            )
            self._core.registry.add_update(handler)
            return handler

        return register

    def graph(
        self,
        name: str,
        *,
        version: int = 1,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        max_lapses: int = DEFAULT_MAX_LAPSES,
    ) -> Graph:
        """A graph workflow (a DAG of steps); add steps with ``@graph.step(...)``.

        ``queue`` defaults to the graph's name. Each step becomes a task of its
        own as soon as its dependencies are done, so independent steps run in
        parallel on any workers. ``max_lapses`` as for [`workflow`][perdure.App.workflow].
        See ``Graph``.
        """
        check_policy("retry", retry)
        graph = Graph(
            name,
            version,
            name if queue is None else queue,
            retry or DEFAULT_WORKFLOW_RETRY,
            max_lapses=max_lapses,
        )
        self._core.registry.add(graph)
        return graph

    queue = forms.direct(queueing.declare)
    schedule = forms.direct(scheduling.declare)

    register = forms.blocking(registering.register)
    register_async = forms.awaiting(registering.register)

    # Starting and reading runs ---------------------------------------------------------

    start = forms.blocking(starting.start, beside=starting.on_callers_thread)
    start_async = forms.awaiting(
        starting.start, here=starting.on_callers_loop, beside=starting.on_callers_thread
    )
    start_many = forms.blocking(starting.start_many, beside=starting.on_callers_thread)
    start_many_async = forms.awaiting(
        starting.start_many, here=starting.on_callers_loop, beside=starting.on_callers_thread
    )
    handle = forms.blocking(reading.handle)
    handle_async = forms.awaiting(reading.handle)
    get_run = forms.blocking(reading.get_run)
    get_run_async = forms.awaiting(reading.get_run)
    list_runs = forms.blocking(reading.list_runs)
    list_runs_async = forms.awaiting(reading.list_runs)
    steps = forms.blocking(reading.steps)
    steps_async = forms.awaiting(reading.steps)
    step_logs = forms.blocking(reading.step_logs)
    step_logs_async = forms.awaiting(reading.step_logs)
    history = forms.blocking(reading.history)
    history_async = forms.awaiting(reading.history)
    events = forms.blocking(reading.events)
    events_async = forms.awaiting(reading.events)
    workers = forms.blocking(reading.workers)
    workers_async = forms.awaiting(reading.workers)
    workflows = forms.blocking(reading.workflows)
    workflows_async = forms.awaiting(reading.workflows)
    registered_workflows = forms.blocking(reading.registered_workflows)
    registered_workflows_async = forms.awaiting(reading.registered_workflows)
    count_runs = forms.blocking(reading.count_runs)
    count_runs_async = forms.awaiting(reading.count_runs)
    run_activity = forms.blocking(reading.run_activity)
    run_activity_async = forms.awaiting(reading.run_activity)
    held_tasks = forms.blocking(reading.held_tasks)
    held_tasks_async = forms.awaiting(reading.held_tasks)

    # Operating on runs ---------------------------------------------------------------

    cancel = forms.blocking(manage.cancel)
    cancel_async = forms.awaiting(manage.cancel)
    retry = forms.blocking(manage.retry)
    retry_async = forms.awaiting(manage.retry)
    restart = forms.blocking(manage.restart)
    restart_async = forms.awaiting(manage.restart)
    fork = forms.blocking(manage.fork)
    fork_async = forms.awaiting(manage.fork)
    cancel_runs = forms.blocking(manage.cancel_runs)
    cancel_runs_async = forms.awaiting(manage.cancel_runs)
    retry_runs = forms.blocking(manage.retry_runs)
    retry_runs_async = forms.awaiting(manage.retry_runs)
    prune = forms.blocking(retention.prune)
    prune_async = forms.awaiting(retention.prune)
    stranded = forms.blocking(stranding.stranded)
    stranded_async = forms.awaiting(stranding.stranded)
    move_runs = forms.blocking(stranding.move_runs)
    move_runs_async = forms.awaiting(stranding.move_runs)

    # Who did what --------------------------------------------------------------------

    record_audit = forms.blocking(auditing.record_audit)
    record_audit_async = forms.awaiting(auditing.record_audit)
    audit_log = forms.blocking(auditing.audit_log)
    audit_log_async = forms.awaiting(auditing.audit_log)

    # Talking to runs -----------------------------------------------------------------

    signal = forms.blocking(messaging.signal)
    signal_async = forms.awaiting(messaging.signal)
    signal_many = forms.blocking(messaging.signal_many)
    signal_many_async = forms.awaiting(messaging.signal_many)
    signals = forms.blocking(messaging.signals)
    signals_async = forms.awaiting(messaging.signals)
    update = forms.blocking(updating.update)
    update_async = forms.awaiting(updating.update)
    update_with_start = forms.blocking(updating.update_with_start)
    update_with_start_async = forms.awaiting(updating.update_with_start)
    updates = forms.blocking(updating.updates)
    updates_async = forms.awaiting(updating.updates)
    pause = forms.blocking(messaging.pause)
    pause_async = forms.awaiting(messaging.pause)
    resume = forms.blocking(messaging.resume)
    resume_async = forms.awaiting(messaging.resume)
    emit = forms.blocking(emitting.emit, beside=starting.on_callers_thread)
    emit_async = forms.awaiting(
        emitting.emit, here=starting.on_callers_loop, beside=starting.on_callers_thread
    )
    emit_many = forms.blocking(emitting.emit_many, beside=starting.on_callers_thread)
    emit_many_async = forms.awaiting(
        emitting.emit_many, here=starting.on_callers_loop, beside=starting.on_callers_thread
    )
    emit_many_recorded = forms.blocking(emitting.emit_many_recorded)
    emit_many_recorded_async = forms.awaiting(emitting.emit_many_recorded)
    emit_recorded = forms.blocking(emitting.emit_recorded)
    emit_recorded_async = forms.awaiting(emitting.emit_recorded)
    emitted_events = forms.blocking(emitting.emitted_events)
    emitted_events_async = forms.awaiting(emitting.emitted_events)
    get_event = forms.blocking(messaging.get_event)
    get_event_async = forms.awaiting(messaging.get_event)
    read_stream = forms.iterating(messaging.read_stream)
    read_stream_async = forms.async_iterating(messaging.read_stream)

    # Queues and schedules ------------------------------------------------------------

    queues = forms.blocking(queueing.queues)
    queues_async = forms.awaiting(queueing.queues)
    set_queue = forms.blocking(queueing.set_queue)
    set_queue_async = forms.awaiting(queueing.set_queue)
    add_schedule = forms.blocking(scheduling.add_schedule)
    add_schedule_async = forms.awaiting(scheduling.add_schedule)
    remove_schedule = forms.blocking(scheduling.remove_schedule)
    remove_schedule_async = forms.awaiting(scheduling.remove_schedule)
    schedules = forms.blocking(scheduling.schedules)
    schedules_async = forms.awaiting(scheduling.schedules)
    get_schedule = forms.blocking(scheduling.get_schedule)
    get_schedule_async = forms.awaiting(scheduling.get_schedule)
    pause_schedule = forms.blocking(scheduling.pause_schedule)
    pause_schedule_async = forms.awaiting(scheduling.pause_schedule)
    resume_schedule = forms.blocking(scheduling.resume_schedule)
    resume_schedule_async = forms.awaiting(scheduling.resume_schedule)
    trigger_schedule = forms.blocking(scheduling.trigger_schedule)
    trigger_schedule_async = forms.awaiting(scheduling.trigger_schedule)
    upcoming_ticks = forms.blocking(scheduling.upcoming_ticks)
    upcoming_ticks_async = forms.awaiting(scheduling.upcoming_ticks)
    tick_schedules = forms.blocking(registering.tick_schedules)
    tick_schedules_async = forms.awaiting(registering.tick_schedules)

    # Workers -------------------------------------------------------------------------

    worker = forms.blocking(working.worker)
    worker_async = forms.here(working.worker)
    run_worker = forms.in_new_loop(working.run_worker)
    run_worker_async = forms.here(working.run_worker)
    run_until_complete = forms.on_thread(draining.run_until_complete)
    run_until_complete_async = forms.here(draining.run_until_complete)

    close = forms.closing(core.close)
    close_async = forms.async_closing(core.close)

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()
