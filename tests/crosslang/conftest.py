"""Fixtures of the cross-language tests: a worker and the API, for clients in other languages."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import perdure
from helpers import BackgroundWorker
from http_api.workload import FAST, define
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer

HERE = Path(__file__).resolve().parent
TOKEN = "crosslang-token-0123456789"


@dataclass(frozen=True)
class Served:
    """Where a foreign client finds perdure: the database, the schema and the API."""

    database_url: str
    schema: str
    api: str
    token: str


@pytest.fixture
def served(app: perdure.App, pg_url: str, schema: str) -> Iterator[Served]:
    """The test workflows registered, a worker running them and the dashboard's API served."""
    define(app)
    app.register()
    server = BackgroundServer(app, DashboardConfig(port=0, token=TOKEN))
    server.wait_started()
    try:
        with BackgroundWorker(app, **FAST):
            yield Served(pg_url, schema, f"{server.url.rstrip('/')}/api/v1", TOKEN)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with the client's npm packages installed (`npm ci`, as .ci/run does)."""
    found = shutil.which("node")
    assert found, "Node.js 20 or newer is needed: install it (apt-get install nodejs npm)"
    assert (HERE / "node_modules" / "pg").is_dir(), (
        "the Node client's packages are missing: run `npm ci` in tests/crosslang (.ci/run does)"
    )
    return found
