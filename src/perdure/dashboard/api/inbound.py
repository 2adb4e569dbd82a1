"""Events in over HTTP: ``POST /events`` (a token's) and ``POST /webhooks/{source}`` (signed).

``POST /events`` passes the API's gate like every POST (a token whose role
may act). A webhook delivery does not: it proves its source by a signature
or the source's own token (``perdure.dashboard.api.signatures``), checked
over the raw body before anything is decoded or written. Its delivery id
is the emit key, so a replayed delivery records nothing new and answers
200 with the first event's id. Each delivery, refused or not, is recorded
in the audit record as ``webhook:<source>``; never its body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from perdure.api.app import App
from perdure.api.emitting import MAX_EVENTS_PER_CALL
from perdure.dashboard import audit_trail
from perdure.dashboard.api import limits, signatures
from perdure.dashboard.api.encode import field, json_of, only_fields
from perdure.dashboard.api.problems import Problem
from perdure.dashboard.hooks_config import WebhookSource
from perdure.dashboard.roles import Principal
from perdure.errors import PerdureError
from perdure.types import EventToEmit

_PLACEHOLDER = re.compile(r"\{([^{}]{1,100})\}")


def _app(request: Request) -> App:
    app: App = request.app.state.perdure_app
    return app


def _answer(event_id: int, name: str, key: str | None, created: bool) -> Response:
    body = {"event_id": event_id, "name": name, "key": key, "created": created}
    return JSONResponse(body, status_code=201 if created else 200)


async def emit(request: Request) -> Response:
    """POST /events: emit an event; 201 when recorded, 200 when its key named an earlier one.

    A JSON array of such objects emits them all in one transaction, all or
    none (``app.emit_many``): one answer each, in order; 201 when any was
    recorded, 200 when every key named an earlier event.
    """
    body = await json_of(request)
    if isinstance(body, list):
        return await _emit_many(request, body)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise Problem(400, "invalid-json", "the body must be a JSON object or an array of them")
    name, key = _named(body)
    event_id, created = await _app(request).emit_recorded_async(name, body.get("payload"), key=key)
    return _answer(event_id, name, key, created)


def _named(body: dict[str, Any]) -> tuple[str, str | None]:
    """The name and key of the event ``body``; 400 for anything else in it."""
    only_fields(body, {"name", "payload", "key"})
    name = field(body, "name", str, None)
    if name is None:
        raise Problem(400, "invalid-argument", "'name' is required")
    return name, field(body, "key", str, None)


async def _emit_many(request: Request, items: list[Any]) -> Response:
    """The events of a JSON array, in one transaction; a bad one is refused naming its index."""
    if not items:
        raise Problem(400, "invalid-argument", "the array holds no event")
    if len(items) > MAX_EVENTS_PER_CALL:
        raise Problem(
            400,
            "invalid-argument",
            f"{len(items)} events in one request: at most {MAX_EVENTS_PER_CALL}",
        )
    events: list[EventToEmit] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise Problem(400, "invalid-argument", f"event {index}: not a JSON object")
        try:
            name, key = _named(item)
        except Problem as exc:
            raise Problem(exc.status, exc.code, f"event {index}: {exc.detail}") from None
        events.append(EventToEmit(name, item.get("payload"), key))
    found = await _app(request).emit_many_recorded_async(events)
    answers = [
        {"event_id": event_id, "name": event.name, "key": event.key, "created": created}
        for event, (event_id, created) in zip(events, found, strict=True)
    ]
    created_any = any(created for _, created in found)
    return JSONResponse(answers, status_code=201 if created_any else 200)


def event_name(template: str, headers: Any, payload: Any) -> str:
    """The template with each ``{X}`` replaced: header ``X``, else the body's field ``X``."""

    def value(match: re.Match[str]) -> str:
        wanted = match.group(1)
        found = headers.get(wanted)
        if found is None and isinstance(payload, dict):
            found = payload.get(wanted)
        if not isinstance(found, str) or not found:
            raise Problem(400, "invalid-argument", f"the delivery has no {wanted}")
        return found

    return _PLACEHOLDER.sub(value, template)


def delivery_id(source: WebhookSource, headers: Any, payload: Any) -> str | None:
    """The id of a delivery (the emit key): GitHub's header, Stripe's event id, or id_header."""
    if source.kind == "github":
        found = headers.get("x-github-delivery")
    elif source.kind == "stripe":
        found = payload.get("id") if isinstance(payload, dict) else None
    else:
        found = headers.get(source.id_header.lower())
    if source.kind in ("github", "stripe") and not isinstance(found, str):
        raise Problem(400, "invalid-argument", "the delivery has no id")
    return found if isinstance(found, str) else None


def _decode(request: Request, raw: bytes) -> Any:
    kind, params = limits.media_type(request.headers.get("content-type", ""))
    if kind != "application/json" or params.get("charset", "utf-8").lower() != "utf-8":
        raise Problem(415, "unsupported-media-type", "send the delivery as application/json")
    limits.check_depth(raw)
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise Problem(400, "invalid-json", f"the body is not JSON: {exc}") from None


async def webhook(request: Request) -> Response:
    """POST /webhooks/{source}: a signed delivery, emitted as an event once per delivery id."""
    sources: dict[str, WebhookSource] = request.app.state.webhooks
    source = sources.get(request.path_params["source"])
    if source is None:
        raise Problem(404, "not-found", "no such webhook source")
    principal = Principal(f"webhook:{source.name}", "webhook", "token")
    address = audit_trail.address_of(request, None)

    async def audit(outcome: str, detail: dict[str, Any]) -> None:
        await audit_trail.record(
            _app(request),
            principal,
            source="api",
            address=address,
            action="webhook",
            outcome=outcome,
            detail=detail,
        )

    try:
        raw = await limits.read_body(request)
        signatures.verify(source, raw, request.headers)
        payload = _decode(request, raw)
        name = event_name(source.event, request.headers, payload)
        key = delivery_id(source, request.headers, payload)
        event_id, created = await _app(request).emit_recorded_async(name, payload, key=key)
    except Problem as refusal:
        outcome = "refused" if refusal.status == 401 else "error"
        await audit(outcome, {"status": refusal.status, "code": refusal.code})
        raise
    except PerdureError as exc:
        await audit("error", {"status": 400, "message": str(exc)[:300]})
        raise
    await audit("ok", {"event": name, "event_id": event_id, "created": created})
    return _answer(event_id, name, key, created)
