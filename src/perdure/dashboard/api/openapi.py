"""The API's OpenAPI 3.1 document, served at ``/api/v1/openapi.json``.

A test checks it against the routes (each documented, each documented one
served) and the answers against its schemas.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from perdure.types import RunStatus

_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}
_TIME = {"type": ["string", "null"], "format": "date-time"}
_ANY: dict[str, Any] = {}

RUN = {
    "type": "object",
    "required": ["id", "workflow", "version", "queue", "status", "done", "created_at"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "workflow": _STR,
        "version": {"type": "integer"},
        "queue": _STR,
        "key": _NULLABLE_STR,
        "status": {"type": "string", "enum": [s.value for s in RunStatus]},
        "input": _ANY,
        "output": _ANY,
        "error": {"type": ["object", "null"]},
        "created_at": {"type": "string", "format": "date-time"},
        "started_at": _TIME,
        "completed_at": _TIME,
        "parent_run_id": _NULLABLE_STR,
        "continued_from": {
            "type": ["string", "null"],
            "description": "The run this one continues (continue-as-new).",
        },
        "continued_to": {
            "type": ["string", "null"],
            "description": "The run that continues this one; GET /runs/{ref}/result follows "
            "the chain to its last run.",
        },
        "priority": {"type": "integer"},
        "tags": {"type": ["object", "null"], "additionalProperties": _STR},
        "done": {"type": "boolean", "description": "The run is in a final state."},
    },
}
PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "code", "detail"],
    "properties": {
        "type": _STR,
        "title": _STR,
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "Stable: branch on it."},
        "detail": _STR,
    },
}
START: dict[str, Any] = {
    "type": "object",
    "required": ["workflow"],
    "additionalProperties": False,
    "properties": {
        "workflow": _STR,
        "input": _ANY,
        "key": {"type": "string", "description": "Idempotency key (or the header)."},
        "version": {"type": "integer", "minimum": 1},
        "delay": {"type": "number", "description": "Seconds before the run is due."},
        "priority": {"type": "integer"},
        "timeout": {"type": "number", "description": "Cancel if unfinished after this."},
        "partition_key": _STR,
        "dedup_key": _STR,
        "tags": {"type": "object", "additionalProperties": _STR},
    },
}
SIGNAL = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": _STR,
        "payload": _ANY,
        "key": {
            "type": "string",
            "description": "Idempotency key: the same signal again answers the same signal_id; "
            "another name or payload with it is 409 idempotency-key-reused.",
        },
    },
}
SIGNAL_SENT = {
    "type": "object",
    "required": ["signal_id", "run", "name"],
    "properties": {"signal_id": {"type": "integer"}, "run": _STR, "name": _STR},
}
UPDATE = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": _STR,
        "payload": _ANY,
        "update_id": {
            "type": "string",
            "description": "The update's id: sending it again applies nothing new and answers "
            "the same reply (a new one is made when absent).",
        },
        "timeout": {
            "type": "number",
            "minimum": 0,
            "maximum": 300,
            "description": "Seconds to wait for the reply (long poll; default 30).",
        },
    },
}
UPDATE_REPLY = {
    "type": "object",
    "required": ["run", "name", "update_id", "status"],
    "properties": {
        "run": _STR,
        "name": _STR,
        "update_id": _STR,
        "status": {"type": "string", "enum": ["completed", "pending"]},
        "reply": _ANY,
    },
}
PAGE = {
    "type": "object",
    "required": ["runs", "next_cursor"],
    "properties": {
        "runs": {"type": "array", "items": {"$ref": "#/components/schemas/Run"}},
        "next_cursor": _NULLABLE_STR,
    },
}
EVENT = {
    "type": "object",
    "required": ["key", "value"],
    "properties": {"key": _STR, "value": _ANY},
}
EMIT = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "description": "The event's name (a perdure name)."},
        "payload": {"description": "A JSON value; absent or null: {}."},
        "key": {
            "type": "string",
            "description": "Idempotency key, per name: the same key again records nothing "
            "and answers the first event's id (200).",
        },
    },
}
EMITTED = {
    "type": "object",
    "required": ["event_id", "name", "key", "created"],
    "properties": {
        "event_id": {"type": "integer"},
        "name": _STR,
        "key": _NULLABLE_STR,
        "created": {"type": "boolean", "description": "False: a replay of an earlier event."},
    },
}


def _one_or_many(schema: str, most: int) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {"oneOf": [ref, {"type": "array", "items": ref, "minItems": 1, "maxItems": most}]}


def _json_one_or_many(schema: str, description: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {
        "description": description,
        "content": {
            "application/json": {"schema": {"oneOf": [ref, {"type": "array", "items": ref}]}}
        },
    }


def _json(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


#: What each refusal means, by status, where one status has codes worth telling apart.
_REFUSALS = {
    400: "Refused: invalid-argument, invalid-json, too-deep (JSON nested over 201 levels), "
    "invalid-header (a malformed header: numbers are ASCII digits).",
    409: "Refused: key-conflict (the key belongs to a run of another workflow), "
    "idempotency-key-reused (the key was sent with another request), invalid-run-state, "
    "update-failed (the update's handler raised: its error is the detail).",
    401: "Refused: unauthorized (no token, or one no entry knows); for a webhook "
    "bad-signature (a missing or wrong signature or token, or a Stripe timestamp "
    "outside the tolerance): nothing is written.",
    404: "Refused: not-found, run-not-found.",
    413: "Refused: body-too-large (over 1 MiB; a larger Content-Length is refused unread).",
    415: "Refused: unsupported-media-type (the body must be UTF-8 application/json).",
}


def _problems(*statuses: int) -> dict[str, Any]:
    content = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    return {
        str(s): {"description": _REFUSALS.get(s, "Refused."), "content": content} for s in statuses
    }


def _param(name: str, where: str, description: str, schema: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema or _STR,
    }


_REF = _param("ref", "path", "The run's id or key.")
_TIMEOUT = _param(
    "timeout",
    "query",
    "Seconds to wait (0-300, default 30).",
    {"type": "number", "minimum": 0, "maximum": 300},
)
#: The Idempotency-Key header: visible ASCII, spaces inside allowed.
_KEY_HEADER = {
    "type": "string",
    "minLength": 1,
    "maxLength": 512,
    "pattern": "^[!-~]([ -~]*[!-~])?$",
}
_FILTERS = [
    _param("status", "query", "One run status."),
    _param("workflow", "query", "A workflow name."),
    _param("version", "query", "A workflow version.", {"type": "integer"}),
    _param("queue", "query", "A queue."),
    _param("worker", "query", "The worker that last claimed the run."),
    _param("key_prefix", "query", "Keys starting with this."),
    _param("since", "query", "Created at or after (ISO 8601).", {"type": "string"}),
    _param("before", "query", "Created before (ISO 8601).", {"type": "string"}),
    _param("parent", "query", "Children of this run id."),
    _param("tag", "query", "name=value; repeat for several.", {"type": "array", "items": _STR}),
    _param("run", "query", "Only these run ids; repeat.", {"type": "array", "items": _STR}),
    _param("archived", "query", "true: list archived runs.", {"type": "boolean"}),
    _param("cursor", "query", "next_cursor of the previous page."),
    _param("limit", "query", "Page size.", {"type": "integer"}),
]


def _steer(operation: str, summary: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{operation}Run",
        "summary": summary,
        "parameters": [_REF],
        "responses": {"200": _json("Run", "The run after the operation."), **_problems(404, 409)},
    }
    if body is not None:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
    return {"post": op}


PATHS: dict[str, Any] = {
    "/runs": {
        "post": {
            "operationId": "startRun",
            "summary": "Start a run (idempotent with the Idempotency-Key header).",
            "parameters": [
                _param(
                    "Idempotency-Key",
                    "header",
                    "The run's key: the same request again answers the same run (200); "
                    "another input with it is 409 idempotency-key-reused.",
                    _KEY_HEADER,
                )
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Start"}}},
            },
            "responses": {
                "201": _json("Run", "A new run."),
                "200": _json("Run", "The run that already had this key."),
                **_problems(400, 409, 422),
            },
        },
        "get": {
            "operationId": "listRuns",
            "summary": "A page of runs, newest first, filtered.",
            "parameters": _FILTERS,
            "responses": {"200": _json("RunPage", "One page."), **_problems(400)},
        },
    },
    "/runs/{ref}": {
        "get": {
            "operationId": "getRun",
            "summary": "One run.",
            "parameters": [_REF],
            "responses": {"200": _json("Run", "The run."), **_problems(404)},
        }
    },
    "/runs/{ref}/signals": {
        "post": {
            "operationId": "signalRun",
            "summary": "Send a signal to a run (idempotent with the body's key).",
            "parameters": [_REF],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Signal"}}
                },
            },
            "responses": {
                "202": _json("SignalSent", "Recorded."),
                **_problems(400, 404, 409),
            },
        }
    },
    "/runs/{ref}/updates": {
        "post": {
            "operationId": "updateRun",
            "summary": "Send an update to a run and wait (long poll) for its reply.",
            "parameters": [_REF],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Update"}}
                },
            },
            "responses": {
                "200": _json("UpdateReply", "The handler's reply."),
                "202": _json(
                    "UpdateReply",
                    "No reply within the timeout (status pending): send the same update_id again.",
                ),
                **_problems(400, 404, 409, 422),
            },
        }
    },
    "/runs/{ref}/cancel": _steer(
        "cancel",
        "Cancel an unfinished run.",
        {"type": "object", "properties": {"reason": _STR}, "additionalProperties": False},
    ),
    "/runs/{ref}/pause": _steer("pause", "Pause an unfinished run."),
    "/runs/{ref}/resume": _steer("resume", "Resume a paused (or sleeping) run."),
    "/runs/{ref}/result": {
        "get": {
            "operationId": "awaitRun",
            "summary": "Long poll: the run once finished, or as it is when the timeout passes.",
            "parameters": [_REF, _TIMEOUT],
            "responses": {
                "200": _json("Run", "Finished (see status, output, error)."),
                "202": _json("Run", "Not finished within the timeout."),
                **_problems(400, 404),
            },
        }
    },
    "/runs/{ref}/events/{key}": {
        "get": {
            "operationId": "awaitEvent",
            "summary": "Long poll: the value the run published under an event key.",
            "parameters": [_REF, _param("key", "path", "The event key."), _TIMEOUT],
            "responses": {
                "200": _json("Event", "Published."),
                **_problems(400, 404),
            },
        }
    },
    "/runs/{ref}/streams/{key}": {
        "get": {
            "operationId": "streamRun",
            "summary": "A run's stream as Server-Sent Events (entry events, then end).",
            "parameters": [
                _REF,
                _param("key", "path", "The stream key."),
                _param(
                    "after",
                    "query",
                    "Skip entries up to this id.",
                    {"type": "integer", "minimum": 0},
                ),
                _param(
                    "Last-Event-ID",
                    "header",
                    "Resume after this id (ASCII digits).",
                    {"type": "integer", "minimum": 0},
                ),
            ],
            "responses": {
                "200": {
                    "description": "id: position, event: entry, data: the JSON value.",
                    "content": {"text/event-stream": {"schema": _STR}},
                },
                **_problems(400, 404),
            },
        }
    },
    "/events": {
        "post": {
            "operationId": "emitEvent",
            "summary": "Emit an event: wakes the runs waiting for it, starts triggered workflows. "
            "An array of events (at most 10,000) is emitted in one transaction, all or none, "
            "each once per key; one answer each, in order.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _one_or_many("Emit", 10_000)}},
            },
            "responses": {
                "201": _json_one_or_many("Emitted", "Recorded (of an array: any of them)."),
                "200": _json_one_or_many(
                    "Emitted",
                    "The key named an earlier event: nothing recorded (of an array: "
                    "every key did).",
                ),
                **_problems(400),
            },
        }
    },
    "/webhooks/{source}": {
        "post": {
            "operationId": "receiveWebhook",
            "summary": "A signed webhook delivery from a configured source, emitted as an event "
            "once per delivery id (GitHub X-GitHub-Delivery, Stripe's event id).",
            "security": [],
            "parameters": [
                _param("source", "path", "The source's name in the webhooks config."),
                _param(
                    "X-Hub-Signature-256",
                    "header",
                    "GitHub: sha256=<hex HMAC-SHA256 of the raw body>.",
                ),
                _param(
                    "Stripe-Signature",
                    "header",
                    "Stripe: t=<unix time>,v1=<hex HMAC-SHA256 of t.body> (v1 may repeat).",
                ),
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ANY}},
            },
            "responses": {
                "201": _json("Emitted", "Recorded as a new event."),
                "200": _json("Emitted", "A replayed delivery: nothing recorded, same event id."),
                **_problems(400, 401, 403, 404, 413, 415),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "responses": {
                "200": {"description": "OpenAPI 3.1.", "content": {"application/json": {}}}
            },
        }
    },
}

# Every call may meet the guards: no token or an unknown one (401); a POST by
# a viewer, in read-only mode or from another site's Origin (403); an event's
# value or a stream read by a viewer without payloads (403); a non-loopback
# Host without a token (400). A POST's body may be too large (413) or not
# JSON (415).
for _path, _item in PATHS.items():
    for _method, _op in _item.items():
        _guards: tuple[int, ...] = (400, 401, 403, 413, 415) if _method == "post" else (400, 401)
        if _path.startswith(("/runs/{ref}/events", "/runs/{ref}/streams")):
            _guards = (400, 401, 403)
        if _path.startswith("/webhooks/"):
            continue
        _op["responses"] = {**_problems(*_guards), **_op["responses"]}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "perdure",
        "version": "1",
        "description": "Start, steer and await durable workflow runs from any language; "
        "emit events, and receive signed webhooks as events.",
    },
    "servers": [{"url": "/api/v1"}],
    "security": [{"bearer": []}],
    "paths": PATHS,
    "components": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "Required when the server has a token (always beyond loopback).",
            }
        },
        "schemas": {
            "Run": RUN,
            "RunPage": PAGE,
            "Start": START,
            "Signal": SIGNAL,
            "SignalSent": SIGNAL_SENT,
            "Update": UPDATE,
            "UpdateReply": UPDATE_REPLY,
            "Event": EVENT,
            "Emit": EMIT,
            "Emitted": EMITTED,
            "Problem": PROBLEM,
        },
    },
}


async def document(request: Request) -> Response:
    """GET /openapi.json: this document."""
    return JSONResponse(DOCUMENT)
