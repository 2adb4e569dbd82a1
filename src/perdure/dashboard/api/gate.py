"""The API's guards, shared with the dashboard (see ``perdure.dashboard.security``).

- **Token.** With a token configured, every call needs ``Authorization:
  Bearer <token>``; the dashboard's login cookie is not accepted here, so a
  page of another site can never act with a browser's cookie.
- **Read-only.** A dashboard served ``--read-only`` refuses every POST (403).
- **Origin.** A POST whose Origin header names another site gets 403.
- **JSON only.** A POST body must be ``application/json``: a cross-site form
  cannot send one without a CORS preflight, which this API never grants.
- **Host.** Without a token the dashboard's loopback-only Host rule applies
  (DNS rebinding), as for its pages.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection, Request

from perdure.dashboard.api.problems import problem
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.security import ASGIApp, Guard, Receive, Scope, Send, same_origin

_READS = ("GET", "HEAD", "OPTIONS")


class ApiGate:
    """ASGI middleware: the bearer token, read-only mode and the Origin rule."""

    def __init__(self, app: ASGIApp, guard: Guard, config: DashboardConfig) -> None:
        """Guard ``app`` with ``guard``'s token and ``config``'s read-only flag."""
        self.app = app
        self.guard = guard
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a refused request with a problem; pass the others."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        refusal = None
        if self.guard.token is not None and not self.guard.bearer(conn):
            refusal = problem(
                401,
                "unauthorized",
                "this API needs its token: send Authorization: Bearer <token>",
                {"www-authenticate": 'Bearer realm="perdure"'},
            )
        elif scope["method"] not in _READS:
            if self.config.read_only:
                refusal = problem(403, "read-only", "this server is read-only")
            elif not same_origin(Request(scope)):
                refusal = problem(403, "cross-origin", "this request comes from another site")
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)
