"""FastAPI: start runs from request handlers, serve their state and streams, share a lifespan.

Install with ``pip install "perdure[fastapi]"``; see docs/integrations/fastapi.md.

- ``lifespan`` ties an App to the FastAPI app's lifespan: the schema is
  made ready at startup, an optional worker runs in the server's event loop,
  and both stop (the worker gracefully) at shutdown.
- ``start_run`` starts a run from a handler and either answers with its
  result or, if the run is still going after ``wait`` seconds, with
  ``202 Accepted`` and a ``Location`` to poll.
- ``router`` serves ``GET /runs/{id}``, the run's streams as Server-Sent
  Events, signals (``POST /runs/{id}/signals/{name}``, which is how an
  approval arrives over HTTP) and cancellation.
- ``add_error_handlers`` maps perdure's errors to HTTP statuses (see
  ``STATUS_BY_ERROR``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic_core import to_jsonable_python

import perdure

#: The HTTP status each perdure error maps to, most specific first.
STATUS_BY_ERROR: tuple[tuple[type[perdure.PerdureError], int], ...] = (
    (perdure.RunNotFound, 404),
    (perdure.UnknownWorkflow, 404),
    (perdure.RunKeyConflict, 409),
    (perdure.InvalidRunState, 409),
    (perdure.RunCancelled, 409),
    (perdure.SerializationError, 422),
    (perdure.ConfigurationError, 422),
    (perdure.ResultTimeout, 504),
    (perdure.EventTimeout, 504),
    (perdure.DatabaseUnavailable, 503),
    (perdure.RunFailed, 500),
    (perdure.PerdureError, 500),
)


def status_for(error: perdure.PerdureError) -> int:
    """The HTTP status for ``error`` (see ``STATUS_BY_ERROR``)."""
    return next(status for kind, status in STATUS_BY_ERROR if isinstance(error, kind))


def add_error_handlers(api: FastAPI) -> None:
    """Answer every perdure error a handler raises with its status and ``{"error", "detail"}``."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, perdure.PerdureError)
        return JSONResponse(
            {"error": type(exc).__name__, "detail": str(exc)}, status_code=status_for(exc)
        )

    api.add_exception_handler(perdure.PerdureError, handle)


def lifespan(
    app: perdure.App, *, worker: bool = False, **worker_options: Any
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A FastAPI ``lifespan`` that owns ``app`` (``FastAPI(lifespan=lifespan(app))``).

    At startup the schema is created or migrated; with ``worker=True`` a worker
    (``worker_options``: those of ``App.worker``) runs in the server's event
    loop until shutdown, when it stops gracefully and the App is closed. The
    App is on ``request.app.state.perdure``.
    """

    @asynccontextmanager
    async def manage(api: FastAPI) -> AsyncIterator[None]:
        api.state.perdure = app
        await app.ensure_schema_async()
        running = await app.worker_async(**worker_options) if worker else None
        task = asyncio.create_task(running.run()) if running is not None else None
        try:
            yield
        finally:
            if running is not None and task is not None:
                running.request_stop()
                await task
            await asyncio.to_thread(app.close)

    return manage


def run_view(run: perdure.Run) -> dict[str, Any]:
    """The JSON shape of a run in responses: id, workflow, status, output and error."""
    return {
        "id": run.id,
        "workflow": run.workflow,
        "status": run.status.value,
        "output": run.output,
        "error": run.error,
    }


async def start_run(
    app: perdure.App,
    request: Request,
    workflow: str | Callable[..., Any],
    input: Any = None,
    *,
    wait: float = 0.0,
    status_route: str = "perdure_run",
    **options: Any,
) -> JSONResponse:
    """Start a run and answer for it: 200 with the result, or 202 with where to look.

    Waits up to ``wait`` seconds for the run to finish: a finished run is
    answered ``200`` with ``run_view``; a failed one raises
    ``RunFailed`` (500 through ``add_error_handlers``). Otherwise the
    answer is ``202 Accepted`` with the run's id and a ``Location`` header
    naming the route ``status_route`` (the ``router``'s status route by
    default). ``options`` are those of ``App.start`` (``key=`` makes a retried
    request return the same run).
    """
    handle = await app.start_async(workflow, input, **options)
    if wait > 0:
        try:
            await handle.result_async(timeout=wait)
        except perdure.ResultTimeout:
            pass
        except (perdure.RunFailed, perdure.RunCancelled):
            raise
        else:
            return JSONResponse(run_view(await app.get_run_async(handle.id)))
    location = str(request.url_for(status_route, run_id=handle.id))
    return JSONResponse(
        {"id": handle.id, "status": (await handle.status_async()).value, "url": location},
        status_code=202,
        headers={"Location": location},
    )


def sse(values: AsyncIterator[Any]) -> StreamingResponse:
    """Serve ``values`` as Server-Sent Events: one ``data:`` JSON line per value, then ``end``."""

    async def events() -> AsyncIterator[str]:
        async for value in values:
            yield f"data: {json.dumps(to_jsonable_python(value))}\n\n"
        yield "event: end\ndata: null\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def router(app: perdure.App, *, prefix: str = "/runs") -> APIRouter:
    """Routes over ``app``'s runs (include with ``api.include_router(router(app))``).

    - ``GET {prefix}/{run_id}``: the run (``run_view``), route name ``perdure_run``;
    - ``GET {prefix}/{run_id}/streams/{key}``: stream ``key`` as Server-Sent Events,
      until the run closes it or finishes;
    - ``POST {prefix}/{run_id}/signals/{name}``: send a signal, the JSON body its
      payload (``?key=`` makes it idempotent);
    - ``POST {prefix}/{run_id}/cancel``: cancel the run.
    """
    routes = APIRouter(prefix=prefix)

    @routes.get("/{run_id}", name="perdure_run")
    async def get_run(run_id: str) -> dict[str, Any]:
        return run_view(await app.get_run_async(run_id))

    @routes.get("/{run_id}/streams/{key}", name="perdure_stream")
    async def stream(run_id: str, key: str) -> StreamingResponse:
        await app.get_run_async(run_id)  # an unknown run is a 404, not an empty stream
        return sse(app.read_stream_async(run_id, key))

    @routes.post("/{run_id}/signals/{name}", name="perdure_signal", status_code=202)
    async def signal(
        run_id: str, name: str, payload: Annotated[Any, Body()] = None, key: str | None = None
    ) -> dict[str, Any]:
        signal_id = await app.signal_async(run_id, name, payload, key=key)
        return {"run": run_id, "signal": name, "id": signal_id}

    @routes.post("/{run_id}/cancel", name="perdure_cancel")
    async def cancel(run_id: str) -> dict[str, Any]:
        return run_view(await app.cancel_async(run_id, "cancelled over HTTP"))

    return routes
