"""Fixtures of the HTTP API tests: the test workflows, a checked TestClient, a real server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

import perdure
from helpers import wait_until
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


@dataclass
class Served:
    """A real ``perdure api`` process on this test's schema."""

    url: str
    proc: subprocess.Popen[bytes]

    def rss_kib(self, field: str = "VmRSS") -> int:
        """The process's resident memory (``VmRSS``) or its peak (``VmHWM``), in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} for process {self.proc.pid}")


@pytest.fixture
def served(defined: perdure.App, pg_url: str, schema: str, tmp_path: Path) -> Iterator[Served]:
    """``perdure api`` serving the test workflows' schema on a free loopback port."""
    env = {**os.environ, "PERDURE_DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema}
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perdure", "api", "--host", "127.0.0.1", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:

        def announced() -> re.Match[str] | None:
            assert proc.poll() is None, f"perdure api exited: {log.read_text()}"
            return re.search(r"perdure api: (http://\S+?)/api/v1/", log.read_text())

        found = wait_until(announced, timeout=30, what="perdure api to listen")
        yield Served(found.group(1), proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
