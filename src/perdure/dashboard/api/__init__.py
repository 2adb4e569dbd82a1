"""The HTTP JSON API under ``/api/v1``: runs from any language (docs/any-language.md).

Served by ``perdure dashboard`` next to its pages, and alone by ``perdure
api``, with the dashboard's guards (``perdure.dashboard.api.gate``).
Every route calls the public [`App`][perdure.App] API; its OpenAPI document
is ``perdure.dashboard.api.openapi.DOCUMENT``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route

from perdure.api.app import App
from perdure.dashboard.api import inbound, openapi, runs, waiting
from perdure.dashboard.api.gate import ApiGate
from perdure.dashboard.api.problems import HANDLERS
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.security import Guard, LoopbackHostOnly, SecurityHeaders

#: Where the API is mounted.
PREFIX = "/api/v1"
#: Where webhooks are posted, under PREFIX: they pass by their signature, not the gate.
WEBHOOKS = "/webhooks"


def routes() -> list[Route]:
    """The API's routes, relative to ``PREFIX``."""
    return [
        Route("/openapi.json", openapi.document, methods=["GET"]),
        Route("/runs", runs.start, methods=["POST"]),
        Route("/runs", runs.listing, methods=["GET"]),
        Route("/runs/{ref}", runs.get, methods=["GET"]),
        Route("/runs/{ref}/signals", runs.signal, methods=["POST"]),
        Route("/runs/{ref}/updates", runs.update, methods=["POST"]),
        Route("/runs/{ref}/cancel", runs.cancel, methods=["POST"]),
        Route("/runs/{ref}/pause", runs.pause, methods=["POST"]),
        Route("/runs/{ref}/resume", runs.resume, methods=["POST"]),
        Route("/runs/{ref}/result", waiting.result, methods=["GET"]),
        Route("/runs/{ref}/events/{key}", waiting.event, methods=["GET"]),
        Route("/runs/{ref}/streams/{key}", waiting.stream, methods=["GET"]),
        Route("/events", inbound.emit, methods=["POST"]),
        Route(f"{WEBHOOKS}/{{source}}", inbound.webhook, methods=["POST"]),
    ]


def create_api(app: App, config: DashboardConfig, guard: Guard | None = None) -> Starlette:
    """The API of ``app`` as an ASGI application, to mount at ``PREFIX``.

    ``guard`` is the dashboard's when the API is served with it (one cookie secret).
    """
    api = Starlette(
        routes=routes(),
        middleware=[
            Middleware(ApiGate, guard=guard or Guard.of(config), config=config, perdure=app)
        ],
        exception_handlers=HANDLERS,
    )
    api.state.perdure_app = app
    api.state.webhooks = {source.name: source for source in config.webhooks}
    return api


def create_standalone(app: App, config: DashboardConfig) -> Starlette:
    """The API alone (``perdure api``), with the dashboard's Host rule and headers."""
    middleware = [Middleware(SecurityHeaders)]
    if not config.auth_required:
        middleware.append(Middleware(LoopbackHostOnly))
    return Starlette(routes=[Mount(PREFIX, app=create_api(app, config))], middleware=middleware)
