"""Reading requests and writing runs as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.requests import Request

from perdure.dashboard import redact
from perdure.dashboard.api import limits
from perdure.dashboard.api.problems import Problem
from perdure.dashboard.security import principal_of
from perdure.types import Run


def run_json(run: Run, payloads: bool = True) -> dict[str, Any]:
    """A run as the API shows it; without ``payloads``, input, output and error details hidden."""
    if not payloads:
        run = redact.run(run)

    def when(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": run.id,
        "workflow": run.workflow,
        "version": run.version,
        "queue": run.queue,
        "key": run.key,
        "status": run.status.value,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "created_at": when(run.created_at),
        "started_at": when(run.started_at),
        "completed_at": when(run.completed_at),
        "parent_run_id": run.parent_run_id,
        "continued_from": run.continued_from,
        "continued_to": run.continued_to,
        "priority": run.priority,
        "tags": run.tags,
        "done": run.status.is_final,
    }


async def json_of(request: Request) -> Any:
    """The request's JSON body, any JSON value (None when empty); 413, 415 or 400 otherwise.

    The size is checked before the body is held (``limits.read_body``)
    and the nesting before it is decoded (``limits.check_depth``).
    """
    raw = await limits.read_body(request)
    if not raw:
        return None
    kind, params = limits.media_type(request.headers.get("content-type", ""))
    if kind != "application/json" or params.get("charset", "utf-8").lower() != "utf-8":
        raise Problem(415, "unsupported-media-type", "send the body as application/json (UTF-8)")
    limits.check_depth(raw)
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise Problem(400, "invalid-json", f"the body is not JSON: {exc}") from None


async def body_of(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty); 413, 415 or 400 otherwise (``json_of``)."""
    body = await json_of(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise Problem(400, "invalid-json", "the body must be a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``body[name]`` if it has the JSON type ``kind`` (None allowed), else 400."""
    value = body.get(name, default)
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise Problem(400, "invalid-argument", f"{name!r} has the wrong JSON type: {value!r:.100}")


def only_fields(body: dict[str, Any], allowed: set[str]) -> None:
    """400 when ``body`` has a field the operation does not know."""
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Problem(400, "invalid-argument", f"unknown fields: {', '.join(unknown)}")


def seconds_param(request: Request, name: str, default: float, maximum: float) -> float:
    """A query parameter in seconds (ASCII digits, a decimal point), from 0 to ``maximum``."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = limits.ascii_decimal(raw, name)
    if not 0 <= value <= maximum:
        raise Problem(400, "invalid-argument", f"{name} must be 0 to {maximum:g} seconds")
    return value


def int_param(request: Request, name: str) -> int | None:
    """An integer query parameter (ASCII digits), or None when absent."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    return limits.ascii_integer(raw, name)


def time_param(request: Request, name: str) -> datetime | None:
    """An ISO 8601 timestamp with a UTC offset, or None when absent."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise Problem(400, "invalid-argument", f"{name} must be an ISO 8601 time with an offset")
    return value


def payloads(request: Request) -> bool:
    """Whether the caller's role may see payloads (``viewer-no-payloads`` may not)."""
    return principal_of(request).can("payloads")


def require_payloads(request: Request) -> None:
    """403 for a role that may not see payloads (an event's value, a stream's entries)."""
    principal = principal_of(request)
    if not principal.can("payloads"):
        raise Problem(403, "forbidden", f"{principal.role} sees no payloads")
