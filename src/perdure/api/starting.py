"""Starting runs: the checks, the insert statement, keys, dedup and debounce.

[`start`][perdure.App.start] validates everything before anything is written (invariant 10),
builds one start (a ``Start`` record, written by
one ``run_insert`` statement: run, first task and history row together) and
runs it on the App's pool or on the caller's connection, so a run can be
started inside the caller's own transaction; on the pool, starts in flight
at once are written together (``perdure.api.start_batch``).
[`start_many`][perdure.App.start_many] starts many runs of one workflow the same way in one
statement (the same ``run_insert``, with many starts): every item is checked before any is written,
and all go through ``insert_runs`` (migration 0015), the one definition of a
start, as a single start does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from perdure.api import start_batch
from perdure.api.core import Core
from perdure.api.handle import RunHandle
from perdure.api.start_options import StartOptions
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import (
    ConfigurationError,
    PerdureError,
    RunKeyConflict,
    RunNotFound,
    UnknownWorkflow,
)
from perdure.ids import new_run_id
from perdure.observability import tracing as _tracing
from perdure.store import caller
from perdure.store.rows import Queueing, StartResult
from perdure.store.statement import Statement
from perdure.store.writes import Start

T = TypeVar("T")


async def start(
    core: Core,
    workflow: str | Callable[..., Any],
    input: Any = None,
    *,
    key: str | None = None,
    version: int | None = None,
    delay: float | timedelta | None = None,
    priority: int = 0,
    timeout: float | timedelta | None = None,
    conn: caller.Connection | caller.AsyncConnection | None = None,
    partition_key: str | None = None,
    dedup_key: str | None = None,
    debounce: float | timedelta | None = None,
    tags: dict[str, str] | None = None,
    queue: str | None = None,
) -> RunHandle:
    """Start a run of ``workflow`` with ``input``; return its handle.

    With ``key``, starting again returns the existing run instead of a new
    one. With ``conn`` (a psycopg connection in a transaction: a
    ``Connection``, or an ``AsyncConnection`` from ``start_async``), the run
    is written in the caller's transaction: it exists only if that commits.
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
    (str: str) are searchable with ``list_runs(tags=...)``. ``queue`` puts
    the run on that queue instead of its workflow's own (a worker serving
    that queue, with the workflow's code, runs it).
    """
    options = StartOptions(partition_key, dedup_key, debounce, tags)
    if queue is not None:
        validate_name("queue", queue)
    if conn is not None:
        run = on_connection(core, conn)
        return await _start(
            core, run, workflow, input, key, version, delay, priority, timeout, options, queue
        )

    return await _start(
        core, core.run, workflow, input, key, version, delay, priority, timeout, options, queue
    )


async def start_many(
    core: Core,
    workflow: str | Callable[..., Any],
    inputs: Iterable[Any],
    *,
    keys: Sequence[str | None] | None = None,
    version: int | None = None,
    delay: float | timedelta | None = None,
    priority: int = 0,
    timeout: float | timedelta | None = None,
    conn: caller.Connection | caller.AsyncConnection | None = None,
    tags: dict[str, str] | None = None,
) -> list[RunHandle]:
    """Start one run of ``workflow`` per item of ``inputs``, in one statement; their
    handles, in order.

    Each start is what [`start`][perdure.App.start] does with the same options; ``keys``
    (one per input, None for no key) makes each idempotent: a key already
    taken, or repeated in ``inputs``, answers the run that has it. Every item
    is checked first: a bad one (its input, its key) refuses the whole batch
    with an error that names its index, and nothing is written. With
    ``conn``, the runs are written in the caller's transaction. Batches of a
    few hundred to a few thousand items start fastest.
    """
    if isinstance(inputs, str | bytes | dict):
        raise ConfigurationError(f"inputs must be a list of inputs, not {inputs!r}")
    items = list(inputs)
    named: list[str | None] = [None] * len(items) if keys is None else list(keys)
    if len(named) != len(items):
        raise ConfigurationError(f"keys has {len(named)} items, inputs has {len(items)}")
    run: Callable[[Statement[Any]], Awaitable[Any]] = core.run
    if conn is not None:
        run = on_connection(core, conn)
    name, resolved = _local(core, workflow, version)
    await core.ready()
    target = resolved or (name, version or 0, None)
    priority = arguments.integer(
        "priority", priority, minimum=-arguments.INT32_MAX, maximum=arguments.INT32_MAX
    )
    queueing, _ = StartOptions(tags=tags).checked(None, delay)
    local = core.registry.get(target[0], target[1]) if resolved else None
    texts: list[str] = []
    for index, (item, key) in enumerate(zip(items, named, strict=True)):
        try:
            named[index] = arguments.optional_text("key", key, max_length=arguments.MAX_KEY_LENGTH)
            value = local.check_input(item) if local is not None else item
            what = f"the input of workflow {name!r}"
            texts.append(serialization.dumps(value, what, core.max_payload_bytes))
        except PerdureError as exc:
            exc.args = (f"item {index} of {len(items)}: {exc}",)
            raise
    delay_seconds = arguments.seconds("delay", 0 if delay is None else delay)
    timeout_seconds = arguments.optional_seconds("timeout", timeout)
    trace_context = _tracing.current_context_json()
    starts = [
        Start(
            new_run_id(),
            target[0],
            target[1],
            target[2],
            key,
            text,
            priority=priority,
            delay_seconds=delay_seconds,
            timeout_seconds=timeout_seconds,
            queueing=Queueing(tags_json=queueing.tags_json),
            trace_context_json=trace_context,
            newest=version is None,
            lookup=resolved is None,
        )
        for key, text in zip(named, texts, strict=True)
    ]
    found: list[StartResult | None] = await run(core.statements.runs.insert(starts))
    if any(result is not None and result.unknown_workflow for result in found):
        raise UnknownWorkflow(name, version)
    handles: list[RunHandle] = []
    for index, key in enumerate(named):
        result = found[index]
        if result is None:
            # A concurrent start of this key, not visible to the statement:
            # the single start tries again.
            handles.append(
                await _start(
                    core,
                    run,
                    workflow,
                    items[index],
                    key,
                    version,
                    delay,
                    priority,
                    timeout,
                    StartOptions(tags=tags),
                )
            )
        else:
            handles.append(_checked(core, result, name, key))
    return handles


def on_callers_loop(options: dict[str, Any]) -> bool:
    """Whether a start runs on the caller's loop: with an async ``conn``, which is the loop's."""
    return caller.is_async(options.get("conn"))


def on_callers_thread(options: dict[str, Any]) -> bool:
    """Whether a start runs off the portal: with a blocking ``conn``, which may wait on locks."""
    return caller.is_sync(options.get("conn"))


def on_connection(
    core: Core, conn: object, operation: str = "start"
) -> Callable[[Statement[Any]], Awaitable[Any]]:
    """Run statements on the caller's connection ``conn`` (given to ``operation``)."""
    if caller.is_sync(conn):
        sync_conn: caller.Connection = conn  # type: ignore[assignment]

        # Driven on the caller's thread (or a worker thread), never on the
        # portal's loop: a transaction waiting on a lock stalls only its caller.
        async def run_sync(stmt: Statement[T]) -> T:
            return caller.execute_sync(sync_conn, stmt)

        return run_sync
    if caller.is_async(conn) and not core.portal.is_running_here():
        async_conn: caller.AsyncConnection = conn  # type: ignore[assignment]

        # The caller's async connection belongs to the caller's loop: run there.
        async def run_async(stmt: Statement[T]) -> T:
            return await caller.execute_async(async_conn, stmt)

        return run_async
    raise ConfigurationError(
        f"conn must be a psycopg.Connection ({operation}_async also takes an AsyncConnection), "
        f"not {type(conn).__name__}"
    )


def _insert_statement(
    core: Core,
    resolved: tuple[str, int, str | None],
    input: Any,
    key: str | None,
    delay: float | timedelta | None,
    priority: int,
    timeout: float | timedelta | None = None,
    options: StartOptions | None = None,
    newest: bool = False,
) -> tuple[Start, Statement[Any] | None]:
    """The run's start, and the debounce that goes first (None without debounce).

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
    local = core.registry.get(name, version)
    if local is not None:
        input = local.check_input(input)  # a typed input is validated before any write
    text = serialization.dumps(input, f"the input of workflow {name!r}", core.max_payload_bytes)
    insert = Start(
        new_run_id(),
        name,
        version,
        queue,
        key,
        text,
        priority=priority,
        delay_seconds=delay_seconds,
        timeout_seconds=timeout_seconds,
        queueing=queueing,
        trace_context_json=_tracing.current_context_json(),
        newest=newest,
        lookup=queue is None,
    )
    if window is None:
        return insert, None
    assert queue is not None, "a debounced start resolves its workflow first"
    debounce = core.statements.runs.debounce(
        workflow=name, queue=queue, key=key, input_json=text, queueing=queueing
    )
    return insert, debounce


async def _insert(
    core: Core, run: Callable[[Statement[Any]], Awaitable[Any]], start: Start
) -> StartResult | None:
    """Write one start with ``run``; on the App's pool, together with the starts in
    flight at once of its shape (``perdure.api.start_batch``)."""
    if run == core.run and start_batch.batchable(start):
        return await start_batch.insert(core, start)
    answers: list[StartResult | None] = await run(core.statements.runs.insert([start]))
    return answers[0]


def _local(
    core: Core, workflow: str | Callable[..., Any], version: int | None
) -> tuple[str, tuple[str, int, str] | None]:
    if callable(workflow) and not isinstance(workflow, str):
        found = core.registry.by_function(workflow)
        if found is None:
            raise UnknownWorkflow(getattr(workflow, "__name__", repr(workflow)), version)
        workflow = found.name
    validate_name("workflow", workflow)
    if version is not None:
        arguments.integer("version", version, minimum=1)
    local = core.registry.get(workflow, version)
    if local is not None:
        local.validate()
    return workflow, (local.name, local.version, local.queue) if local else None


def _checked(core: Core, result: Any, name: str, key: str | None) -> RunHandle:
    if result.workflow != name:
        raise RunKeyConflict(key or "", result.workflow, name)
    return RunHandle(core.owner, result.run_id, created=result.created)


async def _start(
    core: Core,
    run: Callable[[Statement[Any]], Awaitable[Any]],
    workflow: str | Callable[..., Any],
    input: Any,
    key: str | None,
    version: int | None,
    delay: float | timedelta | None,
    priority: int,
    timeout: float | timedelta | None,
    options: StartOptions,
    queue: str | None = None,
) -> RunHandle:
    name, resolved = _local(core, workflow, version)
    await core.ready()
    target: tuple[str, int, str | None]
    if resolved is not None:
        target = resolved if queue is None else (resolved[0], resolved[1], queue)
    elif options.debounce is None and queue is None:
        # Without the workflow's code: the insert itself looks up the
        # version and queue registered in the database (one round trip).
        target = (name, version or 0, None)
    else:
        row = await run(core.statements.workflows.lookup(name, version))
        if row is None:
            raise UnknownWorkflow(name, version)
        target = (row["name"], row["version"], queue or row["queue"])
    start, debounce = _insert_statement(
        core, target, input, key, delay, priority, timeout, options, newest=version is None
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
                return _checked(core, collapsed, name, key)
        result = await _insert(core, run, start)
        if result is not None and result.unknown_workflow:
            raise UnknownWorkflow(name, version)
        if result is not None and (result.created or debounce is None or attempt > 0):
            return _checked(core, result, name, key)
    raise RunNotFound(key or "")
