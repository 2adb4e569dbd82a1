"""The dashboard's shared state and page rendering: templates, CSRF cookie, settings."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from perdure.dashboard import format as fmt
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.data import COUNT_CAP, DashboardData
from perdure.dashboard.security import CSRF_COOKIE, Guard, principal_of

#: The header live refresh sends: answer with the page's live part only.
FRAGMENT_HEADER = "x-perdure-fragment"


@dataclass
class Dashboard:
    """What every handler needs: the data, the guard, the settings, the templates."""

    data: DashboardData
    guard: Guard
    config: DashboardConfig
    templates: Jinja2Templates
    schema: str

    def render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        """Render template ``name`` (its live part ``_name`` for a live refresh).

        Sets a CSRF cookie when the browser has no valid one, and gives every
        template the token, the settings and what the library can do.
        """
        fragment = is_fragment(request)
        principal = principal_of(request)
        token = request.cookies.get(CSRF_COOKIE)
        fresh = not self.guard.csrf_signed(token)
        if fresh:
            token = self.guard.new_csrf()
        full = {
            "request": request,
            "base": request.scope.get("root_path", ""),
            "csrf_token": token,
            "config": self.config,
            "can": self.data.capabilities,
            "actions_allowed": not self.config.read_only and principal.can("act"),
            "principal": principal,
            "payloads": principal.can("payloads"),
            "schema": self.schema,
            "lag": self.data.replication_lag(),
            "now": fmt.now(),
            "signed_in": principal.via != "open",
            "can_sign_out": principal.via == "token",
            "page": "",
            "cap": COUNT_CAP,
            **context,
        }
        template = f"_{name}" if fragment else name
        response = self.templates.TemplateResponse(request, template, full, status_code=status)
        response.headers["cache-control"] = "no-store"
        response.headers["vary"] = "X-Perdure-Fragment, Cookie"
        if context.get("live") is False:
            # A finished run or an older page: live refresh may stop.
            response.headers["x-perdure-live"] = "0"
        if fresh and token is not None:
            set_cookie(request, response, CSRF_COOKIE, token)
        return response


def is_fragment(request: Request) -> bool:
    """Whether the request is a live refresh, which gets the page's live part only."""
    return request.headers.get(FRAGMENT_HEADER) == "1"


def set_cookie(request: HTTPConnection, response: Response, name: str, value: str) -> None:
    """A session cookie for this dashboard only: HttpOnly, SameSite=Strict."""
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def dashboard_of(conn: HTTPConnection) -> Dashboard:
    """The Dashboard of the application serving ``conn``."""
    found: Dashboard = conn.app.state.dashboard
    return found


def templates() -> Jinja2Templates:
    """The package's templates: autoescape on, undefined names are errors."""
    folder = Path(str(resources.files("perdure.dashboard") / "templates"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt.FILTERS)
    return Jinja2Templates(env=env)
