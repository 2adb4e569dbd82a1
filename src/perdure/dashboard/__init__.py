"""The perdure dashboard: a web UI over the same database, served from the package.

``perdure dashboard`` serves it; in code, ``create_app(app, DashboardConfig())``
is an ASGI application and ``serve`` runs it with uvicorn. See
docs/dashboard.md.
"""

from __future__ import annotations

from perdure.dashboard.app import create_app
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.server import serve

__all__ = ["DashboardConfig", "create_app", "serve"]
