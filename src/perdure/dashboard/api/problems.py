"""Errors as RFC 9457 problem details (``application/problem+json``).

Each refusal has a stable ``code`` (also the end of its ``type`` URI) that
clients branch on; ``detail`` is the human explanation.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from perdure.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidRunState,
    PerdureError,
    RunKeyConflict,
    RunNotFound,
    SerializationError,
    UnknownWorkflow,
    UpdateFailed,
    UpdateRejected,
    WorkflowDefinitionError,
)

MEDIA_TYPE = "application/problem+json"
#: The status and code of each refused call, most specific first.
_MAPPING: list[tuple[type[PerdureError], int, str]] = [
    (RunNotFound, 404, "run-not-found"),
    (UnknownWorkflow, 422, "unknown-workflow"),
    (RunKeyConflict, 409, "key-conflict"),
    (InvalidRunState, 409, "invalid-run-state"),
    (UpdateRejected, 422, "update-rejected"),
    (UpdateFailed, 409, "update-failed"),
    (DatabaseUnavailable, 503, "database-unavailable"),
    (SerializationError, 400, "invalid-argument"),
    (WorkflowDefinitionError, 400, "invalid-argument"),
    (ConfigurationError, 400, "invalid-argument"),
]
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Problem(Exception):
    """A refusal raised by a route; answered as a problem document."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        """Refuse with HTTP ``status``, stable ``code`` and a human ``detail``."""
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def problem(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> Response:
    """A problem+json response."""
    body: dict[str, Any] = {
        "type": f"urn:perdure:problem:{code}",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": detail,
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


def of_error(exc: PerdureError) -> Response:
    """The problem that answers a refused library call."""
    for kind, status, code in _MAPPING:
        if isinstance(exc, kind):
            return problem(status, code, str(exc))
    return problem(400, "refused", str(exc))


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem(exc.status, exc.code, exc.detail)


async def _on_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PerdureError)
    return of_error(exc)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    return problem(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))


async def _on_crash(request: Request, exc: Exception) -> Response:
    return problem(500, "internal-error", "the server failed to answer; see its log")


HANDLERS = {
    Problem: _on_problem,
    PerdureError: _on_error,
    HTTPException: _on_http,
    Exception: _on_crash,
}
