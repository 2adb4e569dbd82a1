"""Fixtures of the HTTP API tests: the test workflows and a checked TestClient."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

import perdure
from http_api.openapi_check import check_response
from http_api.workload import define
from perdure.dashboard import DashboardConfig, create_app


@pytest.fixture
def defined(app: perdure.App) -> perdure.App:
    """The App with the test workflows registered."""
    define(app)
    app.register()
    return app


def _check(response: httpx.Response) -> None:
    request = response.request
    if not request.url.path.startswith("/api/v1"):
        return
    media = response.headers.get("content-type", "")
    if media.startswith("text/event-stream"):
        check_response(request.method, request.url.path, response.status_code, media, None)
        return
    response.read()
    body = response.json() if response.content else None
    check_response(request.method, request.url.path, response.status_code, media, body)


MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(defined: perdure.App) -> Iterator[MakeClient]:
    """TestClients of the dashboard (API included) whose every answer is checked."""
    clients: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        client = TestClient(
            create_app(defined, DashboardConfig(**settings)), base_url="http://127.0.0.1"
        )
        client.event_hooks["response"].append(_check)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    """A client of the dashboard on loopback, without a token."""
    return make_client()
