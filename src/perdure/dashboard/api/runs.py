"""Starting, reading, listing and steering runs over HTTP."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from perdure.api.app import App
from perdure.dashboard.api import limits, reuse
from perdure.dashboard.api.encode import (
    body_of,
    field,
    int_param,
    only_fields,
    payloads,
    require_payloads,
    run_json,
    time_param,
)
from perdure.dashboard.api.openapi import START
from perdure.dashboard.api.problems import Problem
from perdure.errors import UpdateTimeout

#: The fields of a start's body, as its OpenAPI schema documents them.
_START_FIELDS = set(START["properties"])
_NUMBER = (int, float)


def app_of(request: Request) -> App:
    """The App the API serves."""
    app: App = request.app.state.perdure_app
    return app


async def start(request: Request) -> Response:
    """POST /runs: start a run; 201 when new, 200 when the key named an existing one."""
    body = await body_of(request)
    only_fields(body, _START_FIELDS)
    key = field(body, "key", str, None)
    header = limits.idempotency_key(request.headers.get("idempotency-key"))
    if header is not None:
        if key is not None and key != header:
            raise Problem(400, "invalid-argument", "the Idempotency-Key header and key differ")
        key = header
    workflow = field(body, "workflow", str, None)
    if workflow is None:
        raise Problem(400, "invalid-argument", "'workflow' is required")
    app = app_of(request)
    handle = await app.start_async(
        workflow,
        body.get("input"),
        key=key,
        version=field(body, "version", int, None),
        delay=field(body, "delay", _NUMBER, None),
        priority=field(body, "priority", int, 0),
        timeout=field(body, "timeout", _NUMBER, None),
        partition_key=field(body, "partition_key", str, None),
        dedup_key=field(body, "dedup_key", str, None),
        tags=field(body, "tags", dict, None),
    )
    run = await app.get_run_async(handle.id)
    if key is not None and not handle.created:
        reuse.check_start(app, run, key, body.get("input"))
    return JSONResponse(
        run_json(run, payloads(request)),
        status_code=201 if handle.created else 200,
        headers={"location": f"{request.url.path.rstrip('/')}/{run.id}"},
    )


async def get(request: Request) -> Response:
    """GET /runs/{ref}: one run, by id or key."""
    run = await app_of(request).get_run_async(request.path_params["ref"])
    return JSONResponse(run_json(run, payloads(request)))


async def listing(request: Request) -> Response:
    """GET /runs: a page of runs, newest first, with the RunFilter criteria."""
    params = request.query_params
    tags: dict[str, str] = {}
    for tag in params.getlist("tag"):
        name, sep, value = tag.partition("=")
        if not sep:
            raise Problem(400, "invalid-argument", f"tag must be name=value, not {tag!r}")
        tags[name] = value
    runs = params.getlist("run") or None
    limit = int_param(request, "limit")
    page = await app_of(request).list_runs_async(
        status=params.get("status"),
        workflow=params.get("workflow"),
        version=int_param(request, "version"),
        queue=params.get("queue"),
        worker=params.get("worker"),
        key_prefix=params.get("key_prefix"),
        since=time_param(request, "since"),
        before=time_param(request, "before"),
        parent=params.get("parent"),
        tags=tags or None,
        runs=None if runs is None else tuple(runs),
        archived=params.get("archived") in ("1", "true"),
        cursor=params.get("cursor"),
        limit=50 if limit is None else limit,
    )
    return JSONResponse(
        {"runs": [run_json(r, payloads(request)) for r in page], "next_cursor": page.next_cursor}
    )


async def signal(request: Request) -> Response:
    """POST /runs/{ref}/signals: send a signal; 202 with its id."""
    body = await body_of(request)
    only_fields(body, {"name", "payload", "key"})
    name = field(body, "name", str, None)
    if name is None:
        raise Problem(400, "invalid-argument", "'name' is required")
    ref = request.path_params["ref"]
    key = field(body, "key", str, None)
    app = app_of(request)
    signal_id = await app.signal_async(ref, name, body.get("payload"), key=key)
    if key is not None:
        await reuse.check_signal(app, ref, signal_id, key, name, body.get("payload"))
    return JSONResponse({"signal_id": signal_id, "run": ref, "name": name}, status_code=202)


#: The longest an update request waits for its reply, and its default.
MAX_UPDATE_WAIT = 300.0
DEFAULT_UPDATE_WAIT = 30.0


async def update(request: Request) -> Response:
    """POST /runs/{ref}/updates: send an update and wait for its reply (200), or answer
    202 (pending) at the timeout; the same update_id again waits for the same reply."""
    require_payloads(request)
    body = await body_of(request)
    only_fields(body, {"name", "payload", "update_id", "timeout"})
    name = field(body, "name", str, None)
    if name is None:
        raise Problem(400, "invalid-argument", "'name' is required")
    timeout = field(body, "timeout", _NUMBER, None)
    timeout = DEFAULT_UPDATE_WAIT if timeout is None else timeout
    if not 0 <= timeout <= MAX_UPDATE_WAIT:
        raise Problem(400, "invalid-argument", f"timeout must be 0 to {MAX_UPDATE_WAIT:g} seconds")
    update_id = field(body, "update_id", str, None) or uuid.uuid4().hex
    app = app_of(request)
    run = await app.get_run_async(request.path_params["ref"])
    answer: dict[str, Any] = {"run": run.id, "name": name, "update_id": update_id}
    try:
        reply = await app.update_async(
            run.id, name, body.get("payload"), update_id=update_id, timeout=timeout
        )
    except UpdateTimeout:
        return JSONResponse({**answer, "status": "pending"}, status_code=202)
    return JSONResponse({**answer, "status": "completed", "reply": reply})


async def cancel(request: Request) -> Response:
    """POST /runs/{ref}/cancel: cancel an unfinished run (body: optional reason)."""
    return await _steer(request, "cancel")


async def pause(request: Request) -> Response:
    """POST /runs/{ref}/pause: pause an unfinished run."""
    return await _steer(request, "pause")


async def resume(request: Request) -> Response:
    """POST /runs/{ref}/resume: resume a paused (or sleeping) run."""
    return await _steer(request, "resume")


async def _steer(request: Request, operation: str) -> Response:
    app = app_of(request)
    ref = request.path_params["ref"]
    body = await body_of(request)
    only_fields(body, {"reason"} if operation == "cancel" else set())
    run: Any
    if operation == "cancel":
        run = await app.cancel_async(ref, field(body, "reason", str, "cancelled by request"))
    elif operation == "pause":
        run = await app.pause_async(ref)
    else:
        run = await app.resume_async(ref)
    return JSONResponse(run_json(run, payloads(request)))
