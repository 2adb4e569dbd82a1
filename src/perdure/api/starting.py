"""Starting runs: the checks, the insert statement, keys, dedup and debounce.

``app.start`` and ``app.start_async`` validate everything before anything is
written (invariant 10), build one ``run_insert`` statement (run, first task and
history row together) and run it on the App's pool or on the caller's
connection, so a run can be started inside the caller's own transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import psycopg

from perdure.api.handle import RunHandle
from perdure.api.portal import Portal
from perdure.api.registry import Registry
from perdure.api.start_options import StartOptions
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import ConfigurationError, RunKeyConflict, RunNotFound, UnknownWorkflow
from perdure.ids import new_run_id
from perdure.observability import tracing as _tracing
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import execute_async, execute_sync

if TYPE_CHECKING:
    from perdure.api.app import App

T = TypeVar("T")


class StartingMixin:
    """The App's ``start`` and ``start_async``."""

    if TYPE_CHECKING:
        _portal: Portal
        statements: Statements
        registry: Registry
        max_payload_bytes: int
        _schema_ready: bool

        async def _run(self, stmt: Statement[T]) -> T: ...

        def ensure_schema(self) -> None: ...

    def _insert_statement(
        self,
        resolved: tuple[str, int, str | None],
        input: Any,
        key: str | None,
        delay: float | timedelta | None,
        priority: int,
        timeout: float | timedelta | None = None,
        options: StartOptions | None = None,
        newest: bool = False,
    ) -> tuple[Statement[Any], Statement[Any] | None]:
        """The run's insert, and the debounce that goes first (None without debounce).

        A ``resolved`` without a queue is a workflow this App has no code for:
        the insert looks its version and queue up among the registered ones.
        """
        name, version, queue = resolved
        key = arguments.optional_text("key", key, max_length=arguments.MAX_KEY_LENGTH)
        priority = arguments.integer(
            "priority", priority, minimum=-arguments.INT32_MAX, maximum=arguments.INT32_MAX
        )
        queueing, window = (options or StartOptions()).checked(key, delay)
        delay_seconds = arguments.seconds("delay", window or (0 if delay is None else delay))
        timeout_seconds = arguments.optional_seconds("timeout", timeout)
        local = self.registry.get(name, version)
        if local is not None:
            input = local.check_input(input)  # a typed input is validated before any write
        text = serialization.dumps(input, f"the input of workflow {name!r}", self.max_payload_bytes)
        insert = self.statements.runs.insert(
            trace_context_json=_tracing.current_context_json(),
            run_id=new_run_id(),
            workflow=name,
            version=version,
            queue=queue,
            key=key,
            input_json=text,
            priority=priority,
            delay_seconds=delay_seconds,
            timeout_seconds=timeout_seconds,
            queueing=queueing,
            newest=newest,
            lookup=queue is None,
        )
        if window is None:
            return insert, None
        assert queue is not None, "a debounced start resolves its workflow first"
        debounce = self.statements.runs.debounce(
            workflow=name, queue=queue, key=key, input_json=text, queueing=queueing
        )
        return insert, debounce

    def _local(
        self, workflow: str | Callable[..., Any], version: int | None
    ) -> tuple[str, tuple[str, int, str] | None]:
        if callable(workflow) and not isinstance(workflow, str):
            found = self.registry.by_function(workflow)
            if found is None:
                raise UnknownWorkflow(getattr(workflow, "__name__", repr(workflow)), version)
            workflow = found.name
        validate_name("workflow", workflow)
        if version is not None:
            arguments.integer("version", version, minimum=1)
        local = self.registry.get(workflow, version)
        if local is not None:
            local.validate()
        return workflow, (local.name, local.version, local.queue) if local else None

    def _checked(self, result: Any, name: str, key: str | None) -> RunHandle:
        if result.workflow != name:
            raise RunKeyConflict(key or "", result.workflow, name)
        return RunHandle(cast("App", self), result.run_id, created=result.created)

    def start(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
        delay: float | timedelta | None = None,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        conn: psycopg.Connection[Any] | None = None,
        partition_key: str | None = None,
        dedup_key: str | None = None,
        debounce: float | timedelta | None = None,
        tags: dict[str, str] | None = None,
    ) -> RunHandle:
        """Start a run of ``workflow`` with ``input``; return its handle.

        With ``key``, starting again returns the existing run instead of a new
        one. With ``conn`` (a psycopg connection in a transaction), the run is
        written in the caller's transaction: it exists only if that commits.
        An unknown workflow or a non-JSON input is refused before anything is
        written. ``delay`` makes the run due later; ``timeout`` cancels it
        (reason "deadline") if it has not finished that long after the start.
        Without ``version`` the run is pinned to the newest version registered
        (in the database, or in this App's code if newer).

        Queueing (docs/queues.md): higher ``priority`` is claimed first;
        ``partition_key`` counts the run against its queue's per-key limits;
        with ``dedup_key``, a start while a run of the queue with that key
        waits to start returns that run; with ``debounce`` (seconds, and a
        ``key`` or ``dedup_key``), starts within the window collapse into one
        run that starts when the window ends, with the latest input. ``tags``
        (str: str) are searchable with ``list_runs(tags=...)``.
        """
        options = StartOptions(partition_key, dedup_key, debounce, tags)
        run = self._run
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise ConfigurationError(
                    f"conn must be a psycopg.Connection (start_async takes an AsyncConnection), "
                    f"not {type(conn).__name__}"
                )
            caller = conn

            # The portal thread drives the caller's sync connection while the
            # caller's thread waits for the answer: one connection, one user.
            async def run(stmt: Statement[T]) -> T:
                return execute_sync(caller, stmt)

        return self._portal.call(
            self._start(run, workflow, input, key, version, delay, priority, timeout, options)
        )

    async def start_async(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
        delay: float | timedelta | None = None,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
        partition_key: str | None = None,
        dedup_key: str | None = None,
        debounce: float | timedelta | None = None,
        tags: dict[str, str] | None = None,
    ) -> RunHandle:
        """Start a run from async code; see :meth:`start`."""
        options = StartOptions(partition_key, dedup_key, debounce, tags)
        if conn is None:
            return await self._portal.run(
                self._start(
                    self._run, workflow, input, key, version, delay, priority, timeout, options
                )
            )
        if not isinstance(conn, psycopg.AsyncConnection):
            raise ConfigurationError(
                f"conn must be a psycopg.AsyncConnection, not {type(conn).__name__}"
            )
        caller = conn

        # The caller's async connection belongs to the caller's loop: run there.
        async def run(stmt: Statement[T]) -> T:
            return await execute_async(caller, stmt)

        return await self._start(
            run, workflow, input, key, version, delay, priority, timeout, options
        )

    async def _start(
        self,
        run: Callable[[Statement[Any]], Awaitable[Any]],
        workflow: str | Callable[..., Any],
        input: Any,
        key: str | None,
        version: int | None,
        delay: float | timedelta | None,
        priority: int,
        timeout: float | timedelta | None,
        options: StartOptions,
    ) -> RunHandle:
        name, resolved = self._local(workflow, version)
        if not self._schema_ready:
            await asyncio.to_thread(self.ensure_schema)
        target: tuple[str, int, str | None]
        if resolved is not None:
            target = resolved
        elif options.debounce is None:
            # Without the workflow's code: the insert itself looks up the
            # version and queue registered in the database (one round trip).
            target = (name, version or 0, None)
        else:
            row = await run(self.statements.workflows.lookup(name, version))
            if row is None:
                raise UnknownWorkflow(name, version)
            target = (row["name"], row["version"], row["queue"])
        stmt, debounce = self._insert_statement(
            target, input, key, delay, priority, timeout, options, newest=version is None
        )
        # A concurrent start with the same key can leave this statement's
        # snapshot without either row (see run_insert); a new statement sees it.
        # A debounced start first tries to collapse into the run that waits
        # to start; if another start inserted that run meanwhile, the insert
        # finds it and the next round collapses into it.
        for attempt in range(5):
            if debounce is not None:
                collapsed = await run(debounce)
                if collapsed is not None:
                    return self._checked(collapsed, name, key)
            result = await run(stmt)
            if result is not None and result.unknown_workflow:
                raise UnknownWorkflow(name, version)
            if result is not None and (result.created or debounce is None or attempt > 0):
                return self._checked(result, name, key)
        raise RunNotFound(key or "")
