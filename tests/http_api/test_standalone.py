"""`perdure api`: the API alone, with the dashboard's guards."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from perdure.cli.main import cli
from perdure.dashboard.api import create_standalone
from perdure.dashboard.config import TOKEN_ENV, DashboardConfig

TOKEN = "standalone-token-0123"


def test_beyond_loopback_the_command_refuses_to_start_without_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    result = CliRunner().invoke(cli, ["api", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code != 0
    assert "without a token" in result.output


def test_the_api_alone_serves_the_api_and_no_page(defined: perdure.App) -> None:
    with TestClient(
        create_standalone(defined, DashboardConfig()), base_url="http://127.0.0.1"
    ) as client:
        assert client.get("/api/v1/runs").json() == {"runs": [], "next_cursor": None}
        assert client.get("/").status_code == 404
        assert client.get("/api/v1/runs", headers={"Host": "evil.example"}).status_code == 400
        assert "content-security-policy" in client.get("/api/v1/openapi.json").headers


def test_the_api_alone_with_a_token(defined: perdure.App) -> None:
    config = DashboardConfig(host="0.0.0.0", token=TOKEN)
    with TestClient(create_standalone(defined, config), base_url="http://10.0.0.5") as client:
        refused = client.get("/api/v1/runs")
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        answer = client.get("/api/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200
