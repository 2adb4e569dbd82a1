"""The CLI on parallel shapes: a graph's definition, child runs, compensated runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

import perdure
from helpers import BackgroundWorker
from perdure.cli.main import cli

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


@pytest.fixture
def invoke(pg_url: str, schema: str) -> Callable[..., Result]:
    def run(*args: str) -> Result:
        return CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, *args], catch_exceptions=False
        )

    return run


def _undo(ctx: perdure.StepContext, out: Any) -> None:
    return None


def test_workflows_show_draws_a_graph_and_runs_show_its_compensation(
    app: perdure.App, invoke: Callable[..., Result]
) -> None:
    g = app.graph("etl")

    @g.step(compensate=_undo)
    def extract(ctx: perdure.StepContext, x: Any) -> int:
        return 1

    @g.step(depends_on=[extract], when=lambda n: n > 0, wait_for_signal="ok", signal_timeout=60)
    def load(ctx: perdure.StepContext, n: int) -> None:
        raise perdure.PermanentError("disk full")

    handle = app.start("etl")
    with BackgroundWorker(app, **FAST):
        app.signal(handle.id, "ok")
        with pytest.raises(perdure.RunFailed):
            handle.result(timeout=30)

    shown = invoke("workflows", "show", "etl")
    assert shown.exit_code == 0, shown.output
    for text in ("graph", "extract", "load", "ok (1m", "_undo", "lambda n: n > 0", "compensated"):
        assert text in shown.output, text
    as_json = json.loads(invoke("workflows", "show", "etl", "--json").output)
    assert as_json["definition"]["edges"] == [["extract", "load"]]
    assert invoke("workflows", "show", "nope").exit_code == 1

    run = invoke("runs", "show", handle.id)
    assert run.exit_code == 0
    for text in ("compensated", "compensate:extract", "compensation", "disk full"):
        assert text in run.output, text
    listed = invoke("runs", "list", "--status", "compensated")
    assert handle.id in listed.output


def test_runs_list_parent_and_runs_show_list_child_runs(
    app: perdure.App, invoke: Callable[..., Result]
) -> None:
    @app.workflow("kid")
    async def kid(ctx: perdure.Context, n: int) -> int:
        return n

    @app.workflow("mom")
    async def mom(ctx: perdure.Context) -> list[int]:
        first = await ctx.start_child("kid", 1)
        second = await ctx.start_child("kid", 2)
        return [await first.result(), await second.result()]

    handle = app.start("mom")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == [1, 2]
    children = json.loads(invoke("runs", "list", "--parent", handle.id, "--json").output)["runs"]
    assert sorted(c["input"] for c in children) == [1, 2]
    assert all(c["parent_run_id"] == handle.id for c in children)
    shown = invoke("runs", "show", handle.id)
    assert "child runs (2)" in shown.output and "kid@1" in shown.output
    with pytest.raises(perdure.ConfigurationError, match="parent must be a run id"):
        app.list_runs(parent="not-a-uuid")
