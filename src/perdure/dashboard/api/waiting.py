"""Waiting over HTTP: a run's result or event by long poll, its stream as Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from perdure.api.handle import RunHandle
from perdure.dashboard.api import limits
from perdure.dashboard.api.encode import (
    int_param,
    payloads,
    require_payloads,
    run_json,
    seconds_param,
)
from perdure.dashboard.api.problems import Problem
from perdure.dashboard.api.runs import app_of
from perdure.errors import EventTimeout, ResultTimeout, RunCancelled, RunFailed

#: The longest a long poll may wait, in seconds.
MAX_WAIT = 300.0
#: The longest stream key (as ctx.write_stream accepts).
MAX_KEY = 200
#: How long a long poll waits when the request does not say.
DEFAULT_WAIT = 30.0


async def result(request: Request) -> Response:
    """GET /runs/{ref}/result: the run once finished (200), or as it is at the timeout (202)."""
    app = app_of(request)
    timeout = seconds_param(request, "timeout", DEFAULT_WAIT, MAX_WAIT)
    run = await app.get_run_async(request.path_params["ref"])
    try:
        await RunHandle(app, run.id).result_async(timeout=timeout)
    except (RunFailed, RunCancelled):
        pass  # a final state: the run's error says why
    except ResultTimeout:
        return JSONResponse(
            run_json(await app.get_run_async(run.id), payloads(request)), status_code=202
        )
    # A run that continued as new answers with the last run of its chain.
    final = await app.get_run_async(run.id)
    while final.continued_to is not None:
        final = await app.get_run_async(final.continued_to)
    return JSONResponse(run_json(final, payloads(request)))


async def event(request: Request) -> Response:
    """GET /runs/{ref}/events/{key}: the event's value, waiting up to the timeout for it."""
    require_payloads(request)
    app = app_of(request)
    timeout = seconds_param(request, "timeout", DEFAULT_WAIT, MAX_WAIT)
    ref, key = request.path_params["ref"], request.path_params["key"]
    try:
        value = await app.get_event_async(ref, key, timeout=timeout)
    except EventTimeout as exc:
        raise Problem(404, "event-not-published", str(exc)) from None
    return JSONResponse({"key": key, "value": value})


async def stream(request: Request) -> Response:
    """GET /runs/{ref}/streams/{key}: the stream's entries as Server-Sent Events.

    Each entry is an ``entry`` event whose id is its position (1, 2, ...) and
    whose data is its JSON value; an ``end`` event follows the last one. A
    client that reconnects with ``Last-Event-ID`` (or ``?after=``) gets the
    entries after that position only.
    """
    require_payloads(request)
    app = app_of(request)
    ref, key = request.path_params["ref"], request.path_params["key"]
    header = request.headers.get("last-event-id")
    if header:
        after = limits.ascii_integer(header, "Last-Event-ID", header=True)
    else:
        after = int_param(request, "after") or 0
    if after < 0:
        raise Problem(400, "invalid-argument", "after must be 0 or more")
    if len(key) > MAX_KEY or not key.isprintable():
        raise Problem(400, "invalid-argument", f"a stream key is 1-{MAX_KEY} printable characters")
    run = await app.get_run_async(ref)  # a missing run is a 404 before the stream opens

    async def events() -> AsyncIterator[str]:
        position = 0
        async for value in app.read_stream_async(run.id, key):
            position += 1
            if position > after:
                yield f"id: {position}\nevent: entry\ndata: {json.dumps(value)}\n\n"
        yield f"event: end\ndata: {json.dumps({'entries': position})}\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
