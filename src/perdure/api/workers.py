"""Workers of an App: build one with its observers, or run one until a signal stops it."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from perdure.api import registering
from perdure.api.core import Core
from perdure.engine.options import Unpack, WorkerArguments, WorkerKeywords
from perdure.errors import ConfigurationError
from perdure.observability import tracing as _tracing

if TYPE_CHECKING:
    from perdure.engine.observer import Observer
    from perdure.engine.worker import Worker


async def worker(
    core: Core,
    /,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    tracing: bool | None = None,
    tracer_provider: Any = None,
    observers: Sequence[Observer] = (),
    **options: Unpack[WorkerKeywords],
) -> Worker:
    """A worker for this App's workflows (``await worker.run()`` in async code).

    Options are those of [`WorkerOptions`][perdure.WorkerOptions]:
    ``concurrency``, ``queues``, ``lease_seconds``, ``poll_seconds``, ...
    With ``metrics_port`` (0: any free port) the worker serves Prometheus
    metrics on ``http://metrics_host:metrics_port/metrics`` while it runs.
    It traces its runs and steps with OpenTelemetry when ``tracing`` is
    True, or by default when the program configured a tracer provider
    (``tracer_provider`` names one). ``observers`` are told of claims,
    executions and steps (see ``Observer``).
    See docs/observability.md.
    """
    # Imported here: reading and starting runs never loads the worker.
    from perdure.engine.options import WorkerOptions
    from perdure.engine.worker import Worker

    defs = core.registry.all()
    if not defs:
        raise ConfigurationError("this App defines no workflow; a worker would have no work")
    for definition in defs.values():
        definition.validate()
    try:
        # Values are checked by WorkerOptions (prune_after may be a timedelta),
        # and an unknown name is refused here too.
        worker_options = WorkerOptions(**cast(dict[str, Any], options))
    except TypeError as exc:
        raise ConfigurationError(f"unknown worker option: {exc}") from None
    watching = list(observers)
    if metrics_port is not None:
        from perdure.observability.metrics import WorkerMetrics

        watching.append(WorkerMetrics(port=metrics_port, host=metrics_host))
    if tracing or (tracing is None and (tracer_provider is not None or _tracing.configured())):
        from perdure.observability.tracing import TracingObserver

        watching.append(TracingObserver(tracer_provider, core.payloads.redacts_errors))
    await core.ready()
    return Worker(
        core.url,
        core.statements,
        defs,
        worker_options,
        max_payload_bytes=core.max_payload_bytes,
        before_start=partial(registering.record, core),
        observers=watching,
        direct_url=core.direct_url,
    )


async def run_worker(core: Core, /, **options: Unpack[WorkerArguments]) -> Worker:
    """Run a worker until SIGINT or SIGTERM, then stop gracefully.

    A second signal stops at once: in-flight runs are handed back to the queue.
    Returns the stopped worker (its ``counts`` say what it did). The signals
    are handled when this runs in the main thread.
    """
    running = await worker(core, **options)
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        running.request_stop(at_once=signals > 1)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
    try:
        await running.run()
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return running
