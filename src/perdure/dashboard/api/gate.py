"""The API's guards, shared with the dashboard (see ``perdure.dashboard.security``).

- **Who.** With tokens configured, every call needs ``Authorization:
  Bearer <token>`` (401 without one, or with one no entry knows); the
  dashboard's login cookie is not accepted here, so a page of another site
  can never act with a browser's cookie. A trusted proxy's user header
  counts, from the proxy's addresses only.
- **Role.** A POST needs a role that may act (operator, admin): 403
  ``forbidden`` otherwise, recorded in the audit record as refused.
- **Read-only.** A dashboard served ``--read-only`` refuses every POST (403).
- **Origin.** A POST whose Origin header names another site gets 403.
- **JSON only.** A POST body must be ``application/json``: a cross-site form
  cannot send one without a CORS preflight, which this API never grants.
- **Host.** Without a token the dashboard's loopback-only Host rule applies
  (DNS rebinding), as for its pages.

Every POST that passes is recorded in the audit record with its outcome
(``perdure.dashboard.audit_trail``).

Webhook deliveries (``POST /webhooks/{source}``) are the exception: they
carry no token and prove their source by its signature
(``perdure.dashboard.api.inbound``), so the gate lets them through
(a read-only server refuses them, 403).
"""

from __future__ import annotations

from starlette.requests import HTTPConnection, Request

from perdure.api.app import App
from perdure.dashboard import audit_trail
from perdure.dashboard.api.problems import problem
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.security import (
    ASGIApp,
    Guard,
    Receive,
    Scope,
    Send,
    same_origin,
    set_principal,
)

_READS = ("GET", "HEAD", "OPTIONS")


class ApiGate:
    """ASGI middleware: who calls, their role, read-only mode, the Origin rule, the audit."""

    def __init__(self, app: ASGIApp, guard: Guard, config: DashboardConfig, perdure: App) -> None:
        """Guard ``app`` with ``guard`` and ``config``; record actions through ``perdure``."""
        self.app = app
        self.guard = guard
        self.config = config
        self.perdure = perdure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a refused request with a problem; pass (and audit) the others."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        relative = scope["path"][len(scope.get("root_path", "")) :]
        if scope["method"] == "POST" and relative.startswith("/webhooks/"):
            inner = self.app
            if self.config.read_only:
                inner = problem(403, "read-only", "this server is read-only")
            await inner(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        principal = self.guard.identify(conn, cookie=False)
        if principal is None:
            refusal = problem(
                401,
                "unauthorized",
                "this API needs a token: send Authorization: Bearer <token>",
                {"www-authenticate": 'Bearer realm="perdure"'},
            )
            await refusal(scope, receive, send)
            return
        set_principal(scope, principal)
        if scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        address = audit_trail.address_of(conn, self.guard.proxy)
        refused = None
        if self.config.read_only:
            refused = problem(403, "read-only", "this server is read-only")
        elif not same_origin(Request(scope)):
            refused = problem(403, "cross-origin", "this request comes from another site")
        elif not principal.can("act"):
            refused = problem(
                403,
                "forbidden",
                f"{principal.name} is a {principal.role}: this role may not change runs",
            )
        if refused is not None:
            await audit_trail.audited(
                refused, self.perdure, principal, address, scope, receive, send
            )
            return
        await audit_trail.audited(self.app, self.perdure, principal, address, scope, receive, send)
