"""The dashboard's ASGI application: ``create_app(perdure_app, config)``.

Pages render on the server with Jinja2 (autoescape on: every value from the
database is escaped); ``static/dashboard.js`` only adds live refresh and
confirmations. Data comes from ``perdure.dashboard.data``, which calls the
library and nothing else.
"""

from __future__ import annotations

from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from perdure.api.app import App
from perdure.dashboard import actions, api, pages
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.data import DashboardData
from perdure.dashboard.security import (
    ASGIApp,
    Guard,
    LoopbackHostOnly,
    Receive,
    Scope,
    SecurityHeaders,
    Send,
    set_principal,
)
from perdure.dashboard.site import Dashboard, templates

#: The API checks its own token (a Bearer header only, see dashboard/api/gate.py).
_PUBLIC = ("/login", "/static/", f"{api.PREFIX}/")


class TokenGate:
    """ASGI middleware: who sends the request; unknown, a 401 (and a browser the login form)."""

    def __init__(self, app: ASGIApp, dashboard: Dashboard) -> None:
        """Guard ``app`` with ``dashboard``'s token."""
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let authenticated requests, the login page and static files through."""
        if scope["type"] != "http" or scope["path"].startswith(_PUBLIC):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        principal = self.dashboard.guard.identify(conn)
        if principal is not None:
            set_principal(scope, principal)
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["method"] == "GET" and "text/html" in conn.headers.get("accept", ""):
            context = {"next": scope["path"], "failed": False}
            request = Request(scope, receive)
            response = self.dashboard.render(request, "login.html", context, status=401)
        else:
            response = PlainTextResponse(
                "401 Unauthorized: this dashboard needs a token (Authorization: Bearer <token>)",
                status_code=401,
                headers={"www-authenticate": 'Bearer realm="perdure"'},
            )
        await response(scope, receive, send)


def create_app(
    app: App, config: DashboardConfig | None = None, reader: App | None = None
) -> Starlette:
    """The dashboard of ``app`` as an ASGI application (serve it with uvicorn).

    With ``reader`` (an App on a hot standby) pages read from it, the header
    shows its replication lag, and actions still go through ``app``.

    ``config`` defaults to loopback without a token (DashboardConfig refuses
    any other host without one).
    """
    config = config or DashboardConfig()
    dashboard = Dashboard(
        data=DashboardData(app, reader),
        guard=Guard.of(config),
        config=config,
        templates=templates(),
        schema=app.schema,
    )
    static = StaticFiles(directory=str(resources.files("perdure.dashboard") / "static"))
    routes = [
        *pages.routes(),
        *actions.routes(),
        Mount("/static", app=static, name="static"),
        Mount(api.PREFIX, app=api.create_api(app, config, dashboard.guard)),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if not config.auth_required:
        # Without a token only this machine may connect; a page of another site
        # that rebinds its DNS name to 127.0.0.1 is refused by its Host header.
        middleware.append(Middleware(LoopbackHostOnly))
    middleware.append(Middleware(TokenGate, dashboard=dashboard))
    web = Starlette(routes=routes, middleware=middleware, exception_handlers=pages.HANDLERS)
    web.state.dashboard = dashboard
    return web
