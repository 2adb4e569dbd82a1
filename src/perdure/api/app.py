"""App: define workflows, start and inspect runs, run workers.

Every operation is written once as a coroutine. The sync methods run it on the
App's private event loop (:mod:`perdure.api.portal`), the ``_async`` methods
await it from the caller's loop. A ``conn=`` argument runs the statement on the
caller's own psycopg connection instead, inside the caller's transaction.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from perdure.api.graph import Graph
from perdure.api.handle import RunHandle
from perdure.api.manage import ManageMixin, check_reason
from perdure.api.messaging import MessagingMixin
from perdure.api.portal import Portal
from perdure.api.queues import QueueDef, QueuesMixin
from perdure.api.reading import ReadingMixin
from perdure.api.registry import Registry, WorkflowDef
from perdure.api.retention import RetentionMixin
from perdure.api.schedules import ScheduleDef, SchedulesMixin
from perdure.api.starting import StartingMixin
from perdure.clock import Clock
from perdure.engine import arguments, serialization
from perdure.engine.observer import Observer
from perdure.engine.retry import DEFAULT_WORKFLOW_RETRY, RetryPolicy, check_policy
from perdure.engine.worker import Worker, WorkerOptions
from perdure.errors import (
    ConfigurationError,
    InvalidRunState,
    RunNotFound,
    WorkflowDefinitionError,
)
from perdure.observability import tracing as _tracing
from perdure.store import migrate as migrations
from perdure.store.connect import direct_url_from_env
from perdure.store.statement import Statement
from perdure.store.statements import Statements, validate_schema
from perdure.store.store import AsyncStore
from perdure.types import Run, RunStatus

log = logging.getLogger("perdure")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class App(
    StartingMixin,
    ReadingMixin,
    MessagingMixin,
    QueuesMixin,
    SchedulesMixin,
    ManageMixin,
    RetentionMixin,
):
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
    ) -> None:
        """Create an App; nothing connects until the first call that needs the database.

        ``max_payload_bytes`` (1 KiB to 128 MiB) caps every encoded input, step
        output, signal payload and result; a larger one is refused with
        SerializationError where it enters. ``direct_url`` (else
        ``PERDURE_DIRECT_DATABASE_URL``) is a direct connection to the primary
        when ``url`` goes through a transaction-mode pooler: migrations and
        worker LISTEN and session locks use it (see docs/deploying.md).
        """
        if url is not None and not isinstance(url, str):
            raise ConfigurationError(f"url must be a PostgreSQL URL string, not {url!r}")
        self._url = url
        if direct_url is not None and not isinstance(direct_url, str):
            raise ConfigurationError(
                f"direct_url must be a PostgreSQL URL string, not {direct_url!r}"
            )
        self._direct_url = direct_url
        if schema is None:
            schema = os.environ.get("PERDURE_SCHEMA") or "perdure"
        self.schema = validate_schema(schema)
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigurationError(f"clock must be a perdure Clock, not {clock!r}")
        self.clock = clock or Clock()
        self.auto_migrate = arguments.flag("auto_migrate", auto_migrate)
        self.max_payload_bytes = arguments.integer(
            "max_payload_bytes",
            max_payload_bytes,
            minimum=1024,
            maximum=serialization.MAX_PAYLOAD_LIMIT,
        )
        self.pool_size = arguments.integer("pool_size", pool_size, minimum=1, maximum=1000)
        self.registry = Registry()
        self._queues: dict[str, QueueDef] = {}
        self._schedule_defs: list[ScheduleDef] = []
        self.q = Statements(self.schema, self.clock)
        self._portal = Portal()
        self._store: AsyncStore | None = None
        self._store_lock: asyncio.Lock | None = None
        self._schema_ready = False
        self._lock = threading.Lock()

    # Configuration ---------------------------------------------------------------

    def configure(
        self, *, url: str | None = None, schema: str | None = None, direct_url: str | None = None
    ) -> None:
        """Point the App at another database or schema (before first use; the CLI uses this)."""
        if self._store is not None or self._schema_ready:
            raise ConfigurationError("configure() must be called before the App is used")
        if url is not None:
            if not isinstance(url, str):
                raise ConfigurationError(f"url must be a PostgreSQL URL string, not {url!r}")
            self._url = url
        if direct_url is not None:
            self._direct_url = direct_url
        if schema is not None:
            self.schema = validate_schema(schema)
            self.q = Statements(self.schema, self.clock)

    @property
    def url(self) -> str:
        """The database URL in use, resolving (and starting the embedded server) if needed."""
        with self._lock:
            if self._url is None:
                self._url = os.environ.get("PERDURE_DATABASE_URL") or self._embedded_url()
            return self._url

    @property
    def direct_url(self) -> str | None:
        """The direct (unpooled) URL, when the main URL goes through a pooler."""
        return direct_url_from_env(self._direct_url)

    @property
    def session_url(self) -> str:
        """The URL for migrations and session work: the direct URL, else the main one."""
        return self.direct_url or self.url

    @staticmethod
    def _embedded_url() -> str:
        from perdure.store import embedded

        server = embedded.ensure_server()
        log.info("using embedded PostgreSQL: %s", embedded.removal_hint(server.data_dir))
        return server.url

    def ensure_schema(self) -> None:
        """Migrate the schema (or check it is current when auto_migrate is off), once."""
        if self._schema_ready:
            return
        url = self.session_url
        with self._lock:
            if self._schema_ready:
                return
            if self.auto_migrate:
                migrations.migrate(url, self.schema)
            else:
                with psycopg.connect(url) as conn:
                    migrations.ensure_current(conn, self.schema)
            self._schema_ready = True

    async def _get_store(self) -> AsyncStore:
        if self._store is not None:
            return self._store
        # Only the portal loop runs this, so one asyncio lock (made on first
        # use, on that loop) keeps concurrent first calls from opening two pools.
        if self._store_lock is None:
            self._store_lock = asyncio.Lock()
        async with self._store_lock:
            if self._store is None:
                await asyncio.to_thread(self.ensure_schema)
                store = AsyncStore(
                    self.url,
                    self.q,
                    min_size=1,
                    max_size=self.pool_size,
                    name="perdure-app",
                    direct_url=self.direct_url,
                )
                await store.open()
                self._store = store
                # Close the pool at exit if the program did not: its tasks
                # would otherwise be destroyed pending, with a warning each.
                atexit.register(self.close)
        return self._store

    async def _run(self, stmt: Statement[T]) -> T:
        return await (await self._get_store()).execute(stmt)

    # Definitions -----------------------------------------------------------------

    def workflow(
        self,
        name: str | None = None,
        *,
        version: int = 1,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Callable[[F], F]:
        """Decorate ``def`` or ``async def wf(ctx, input)`` as a durable workflow.

        ``name`` defaults to the function's name and ``queue`` to the workflow's
        name. ``retry`` applies to exceptions raised by the workflow body outside
        its steps (steps have their own policy).
        """

        check_policy("retry", retry)

        def register(fn: F) -> F:
            if not callable(fn):
                raise WorkflowDefinitionError(
                    f"@app.workflow decorates a function, not {type(fn).__name__} {fn!r}"
                )
            wf_name = getattr(fn, "__name__", None) if name is None else name
            self.registry.add(
                WorkflowDef(
                    wf_name,  # type: ignore[arg-type]  # checked by WorkflowDef
                    version,
                    wf_name if queue is None else queue,  # type: ignore[arg-type]
                    fn,
                    retry or DEFAULT_WORKFLOW_RETRY,
                )
            )
            return fn

        return register

    def graph(
        self,
        name: str,
        *,
        version: int = 1,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Graph:
        """A graph workflow (a DAG of steps); add steps with ``@graph.step(...)``.

        ``queue`` defaults to the graph's name. Each step becomes a task of its
        own as soon as its dependencies are done, so independent steps run in
        parallel on any workers. See :class:`~perdure.Graph`.
        """
        check_policy("retry", retry)
        graph = Graph(
            name, version, name if queue is None else queue, retry or DEFAULT_WORKFLOW_RETRY
        )
        self.registry.add(graph)
        return graph

    def register(self) -> None:
        """Record this App's workflow definitions and queue settings in the database."""
        self._portal.call(self._register())

    async def _register(self, store: AsyncStore | None = None) -> None:
        target = store or await self._get_store()
        for d in self.registry.all().values():
            d.validate()
            await target.execute(
                self.q.workflow_upsert(
                    name=d.name,
                    version=d.version,
                    queue=d.queue,
                    kind=d.kind,
                    definition_json=serialization.dumps(d.definition(), "definition"),
                    fingerprint=d.fingerprint,
                )
            )
        await self._register_queues(target)
        await self._register_schedules(target)

    def handle(self, ref: str) -> RunHandle:
        """A handle on the existing run with id (or key) ``ref``."""
        return RunHandle(self, self.get_run(ref).id, created=False)

    # Operating on runs ---------------------------------------------------------------

    def retry(self, ref: str) -> RunHandle:
        """Queue a failed or cancelled run again, resuming at the step that failed."""
        return self._portal.call(self._retry(ref))

    async def retry_async(self, ref: str) -> RunHandle:
        """Queue a failed or cancelled run again (async)."""
        return await self._portal.run(self._retry(ref))

    async def _retry(self, ref: str) -> RunHandle:
        run = await self._find(ref)
        if not await self._run(self.q.run_retry([run.id])):
            raise InvalidRunState(run.id, run.status.value, "retry")
        return RunHandle(self, run.id, created=False)

    def cancel(self, ref: str, reason: str = "cancelled by request") -> Run:
        """Cancel an unfinished run; cancelling a cancelled run again changes nothing."""
        return self._portal.call(self._cancel(ref, reason))

    async def cancel_async(self, ref: str, reason: str = "cancelled by request") -> Run:
        """Cancel an unfinished run (async)."""
        return await self._portal.run(self._cancel(ref, reason))

    async def _cancel(self, ref: str, reason: str) -> Run:
        check_reason(reason)
        run = await self._find(ref)
        found = await self._run(self.q.run_cancel([run.id], reason[:1000]))
        if not found:
            raise RunNotFound(ref)
        row = found[0]
        previous = RunStatus(row["previous_status"])
        if not row["changed"] and previous != RunStatus.CANCELLED:
            raise InvalidRunState(run.id, previous.value, "cancel")
        return await self._find(run.id)

    # Workers -------------------------------------------------------------------------

    def worker(
        self,
        *,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        tracing: bool | None = None,
        tracer_provider: Any = None,
        observers: Sequence[Observer] = (),
        **options: Any,
    ) -> Worker:
        """A worker for this App's workflows (``await worker.run()`` in async code).

        Options are those of :class:`~perdure.engine.worker.WorkerOptions`:
        ``concurrency``, ``queues``, ``lease_seconds``, ``poll_seconds``, ...
        With ``metrics_port`` (0: any free port) the worker serves Prometheus
        metrics on ``http://metrics_host:metrics_port/metrics`` while it runs.
        It traces its runs and steps with OpenTelemetry when ``tracing`` is
        True, or by default when the program configured a tracer provider
        (``tracer_provider`` names one). ``observers`` are told of claims,
        executions and steps (see :class:`~perdure.engine.observer.Observer`).
        See docs/observability.md.
        """
        defs = self.registry.all()
        if not defs:
            raise ConfigurationError("this App defines no workflow; a worker would have no work")
        for definition in defs.values():
            definition.validate()
        try:
            worker_options = WorkerOptions(**options)
        except TypeError as exc:
            raise ConfigurationError(f"unknown worker option: {exc}") from None
        watching = list(observers)
        if metrics_port is not None:
            from perdure.observability.metrics import WorkerMetrics

            watching.append(WorkerMetrics(port=metrics_port, host=metrics_host))
        if tracing or (tracing is None and (tracer_provider is not None or _tracing.configured())):
            from perdure.observability.tracing import TracingObserver

            watching.append(TracingObserver(tracer_provider))
        self.ensure_schema()
        return Worker(
            self.url,
            self.q,
            defs,
            worker_options,
            max_payload_bytes=self.max_payload_bytes,
            before_start=self._register,
            observers=watching,
            direct_url=self.direct_url,
        )

    def run_worker(self, **options: Any) -> Worker:
        """Run a worker in this thread until SIGINT or SIGTERM, then stop gracefully.

        A second signal stops at once: in-flight runs are handed back to the queue.
        Returns the stopped worker (its ``counts`` say what it did).
        """
        worker = self.worker(**options)

        async def main() -> None:
            loop = asyncio.get_running_loop()
            current = asyncio.current_task()
            signals = 0

            def on_signal() -> None:
                nonlocal signals
                signals += 1
                worker.request_stop()
                if signals > 1 and current is not None:
                    worker.options.shutdown_seconds = 0

            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, on_signal)
            await worker.run()

        asyncio.run(main())
        return worker

    def run_until_complete(self, run: RunHandle | str, **options: Any) -> Any:
        """Execute due work in this process until ``run`` finishes or nothing is due.

        The same code path as a worker (perdure.testing.drain); returns the
        run's result, or raises ResultTimeout if it still waits (a timer not
        yet due, a signal not yet sent).
        """
        from perdure.testing import run_until_complete

        return run_until_complete(self, run, **options)

    def close(self) -> None:
        """Close the App's connections and its private loop."""
        store, self._store = self._store, None
        atexit.unregister(self.close)
        if store is not None:
            try:
                self._portal.call(store.close())
            except RuntimeError:
                pass
        self._portal.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
