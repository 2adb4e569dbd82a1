"""The chain of a continued run as the CLI, the HTTP API and the dashboard show it."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from perdure import testing
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app


def _chain_of_two(app: perdure.App) -> tuple[perdure.RunHandle, str]:
    """A run that continued once; the handle of the first run and the id of the second."""

    @app.workflow("twice")
    async def twice(ctx: perdure.Context, n: int) -> int:
        n = await ctx.step("inc", lambda v: v + 1, n)
        if n < 2:
            await ctx.continue_as_new(n)
        return n * 10

    first = app.start("twice", 0, key="twice-1")
    testing.drain(app)
    assert first.result(timeout=10) == 20
    second = first.get().continued_to
    assert second is not None
    return first, second


def test_runs_show_prints_both_links_of_the_chain(make_app: Any, pg_url: str, schema: str) -> None:
    app = make_app()
    first, second = _chain_of_two(app)

    def show(*args: str) -> str:
        result = CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, "runs", "show", *args]
        )
        assert result.exit_code == 0, result.output
        return result.output

    old = show(first.id)
    assert "continued to" in old and second in old and "continued" in old
    new = show("twice-1")  # the key names the live end of the chain
    assert "continued from" in new and first.id in new
    document = json.loads(show(first.id, "--json"))
    assert document["run"]["status"] == "continued"
    assert document["run"]["continued_to"] == second


def test_the_http_result_and_the_run_page_follow_the_chain(make_app: Any) -> None:
    app = make_app()
    first, second = _chain_of_two(app)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        answer = client.get(f"/api/v1/runs/{first.id}/result", params={"timeout": "5"})
        assert answer.status_code == 200
        body = answer.json()
        assert (body["id"], body["status"], body["output"]) == (second, "completed", 20)
        assert body["continued_from"] == first.id
        own = client.get(f"/api/v1/runs/{first.id}").json()
        assert (own["status"], own["continued_to"]) == ("continued", second)
        page = client.get(f"/runs/{first.id}").text
        assert "continued to" in page and f"/runs/{second}" in page
        page = client.get(f"/runs/{second}").text
        assert "continued from" in page and f"/runs/{first.id}" in page
