"""Runs no live worker serves: seen at once, and moved to a served version if they recorded nothing.

A worker process serving only version 2 of workflow "pinned"
(tests/apps/versioned_app.py) leaves a version-1 run waiting: the metric,
``/readyz``, ``perdure workflows list`` and ``app.stranded()`` say so as
soon as that worker is registered; ``perdure runs move-version`` moves the
run, and the version-2 worker runs it to completion. Runs that recorded
steps stay pinned; a filter moves only its runs; bad input is refused
with nothing written.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import perdure
from apps import versioned_app
from helpers import BackgroundWorker, wait_until
from perdure.api.filters import RunFilter
from perdure.cli.main import cli
from perdure.types import SkippedRun, StrandedVersion

TARGET = "apps.versioned_app:app"
MOVE = ["runs", "move-version", "--workflow", "pinned", "--version", "1", "--to", "2"]
BAD = ["--workflow", "stepped", "--version", "1", "--to", "7", "--yes"]
OPTIONS = {"concurrency": 2, "poll_seconds": 0.05, "lease_seconds": 5}


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str, accept: str | None = None) -> tuple[int, str]:
    """GET ``path`` on the worker's metrics port: the status and the body."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answers(port: int) -> bool:
    """True once the worker's /readyz answers 200 (False while nothing listens yet)."""
    try:
        return get(port, "/readyz")[0] == 200
    except urllib.error.URLError:
        return False


def test_a_run_only_old_workers_served_is_stranded_everywhere_and_moving_it_runs_it(
    make_app: Callable[..., perdure.App], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    app = make_app()
    versioned_app.define(app, [1, 2])
    base = ["--database-url", pg_url, "--schema", schema]
    old = app.start("pinned", "old", version=1)
    port = free_port()
    proc = spawn_worker(
        TARGET, "--poll-seconds", "0.2", "--metrics-port", str(port), VERSIONED_APP_VERSIONS="2"
    )
    wait_until(
        lambda: [w for w in app.workers() if w.pid == proc.pid and w.status == "running"],
        60,
        what="the version-2 worker to register",
    )
    wait_until(lambda: answers(port), 60, what="the worker's /readyz")

    # Seen at once: nothing below polls.
    expected = StrandedVersion("pinned", 1, 1, ["pinned"], [2])
    assert app.stranded() == [expected]
    assert expected.message == (
        "1 run of pinned@1 waits for a worker that serves version 1; live workers serve version 2"
    )
    status, metrics = get(port, "/metrics")
    assert status == 200
    assert 'perdure_runs_stranded{version="1",workflow="pinned"} 1.0' in metrics
    assert 'perdure_runs_stranded{version="2"' not in metrics
    # /readyz names it, and stays 200 (documented: a fleet matter).
    status, body = get(port, "/readyz")
    assert (status, body) == (200, f"ok\nstranded: {expected.message}\n")
    status, body = get(port, "/readyz?format=json")
    detail = json.loads(body)
    assert status == 200 and detail["ready"] is True
    assert detail["stranded"] == [
        {
            "workflow": "pinned",
            "version": 1,
            "runs": 1,
            "queues": ["pinned"],
            "served": [2],
            "message": expected.message,
        }
    ]
    assert json.loads(get(port, "/readyz", accept="application/json")[1]) == detail

    listed = {(w.name, w.version): w.stranded for w in app.workflows()}
    assert listed[("pinned", 2)] == 0
    table = CliRunner().invoke(cli, [*base, "workflows", "list"])
    assert table.exit_code == 0, table.output
    assert "stranded: 1 run of pinned@1 waits" in table.output
    assert "perdure runs move-version --workflow pinned --version 1 --to 2" in table.output
    only = CliRunner().invoke(cli, [*base, "workflows", "list", "--stranded", "--json"])
    assert only.exit_code == 3, only.output
    assert json.loads(only.output) == [
        {"workflow": "pinned", "version": 1, "runs": 1, "queues": ["pinned"], "served": [2]}
    ]

    # A dry run changes nothing.
    dry = CliRunner().invoke(
        cli,
        [*base, *MOVE, "--dry-run", "--json"],
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["moved"] == [old.id]
    assert app.get_run(old.id).version == 1

    moved = CliRunner().invoke(
        cli,
        [*base, "--as", "ops-oncall", *MOVE, old.id, "--yes", "--json"],
    )
    assert moved.exit_code == 0, moved.output
    outcome = json.loads(moved.output)
    assert (outcome["moved"], outcome["skipped"], outcome["dry_run"]) == ([old.id], [], False)
    assert old.result(timeout=60) == {"version": 2, "pid": proc.pid}
    assert app.get_run(old.id).version == 2
    moves = [e for e in app.history(old.id) if e.event == "run_version_moved"]
    assert [e.detail for e in moves] == [{"from": 1, "to": 2}]
    assert app.stranded() == []
    # The worker reuses a reading for up to two seconds.
    wait_until(lambda: "perdure_runs_stranded{" not in get(port, "/metrics")[1], 10)
    wait_until(lambda: get(port, "/readyz") == (200, "ok\n"), 10)
    audit = app.audit_log(action="move-version")
    assert [(a.actor, a.via, a.outcome, a.runs) for a in audit] == [
        ("ops-oncall", "cli", "ok", [old.id])
    ]


def stepped(target: perdure.App, version: int) -> None:
    """Workflow "stepped": version 1 records a step then sleeps an hour; version 2 returns."""

    def mark() -> str:
        return "marked"

    if version == 1:

        @target.workflow("stepped", version=1)
        async def first(ctx: perdure.Context, region: str) -> str:
            await ctx.step("mark", mark)
            await ctx.sleep(3600)
            return "v1"

    else:

        @target.workflow("stepped", version=2)
        async def second(ctx: perdure.Context, region: str) -> str:
            return f"v2 {region}"


def test_recorded_runs_stay_pinned_and_a_filter_moves_only_its_runs(
    make_app: Callable[..., perdure.App], db: psycopg.Connection[Any], pg_url: str, schema: str
) -> None:
    one = make_app()
    stepped(one, 1)
    with BackgroundWorker(one, **OPTIONS):
        recorded = one.start("stepped", "rec")
        wait_until(
            lambda: one.get_run(recorded.id).status == perdure.RunStatus.WAITING,
            what="the run to record its step and sleep",
        )
    eu = [one.start("stepped", "eu", tags={"region": "eu"}) for _ in range(3)]
    us = [one.start("stepped", "us", tags={"region": "us"}) for _ in range(2)]
    two = make_app()
    stepped(two, 2)
    steps_before = db.execute(
        "SELECT position, name, status FROM steps WHERE run_id = %s ORDER BY position",
        [recorded.id],
    ).fetchall()
    assert steps_before, "the run recorded its step"
    history_before = [e.event for e in two.history(recorded.id)]

    with BackgroundWorker(two, **OPTIONS):
        wait_until(
            lambda: [e for e in two.stranded() if e.served == [2]],
            what="the version-2 worker to register",
        )
        assert two.stranded() == [StrandedVersion("stepped", 1, 6, ["stepped"], [2])]
        listed = {(w.name, w.version): w.stranded for w in two.workflows()}
        assert listed == {("stepped", 1): 6, ("stepped", 2): 0}
        table = CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, "workflows", "list"]
        )
        assert table.exit_code == 0, table.output
        assert "stranded 6" in table.output

        by_filter = two.move_runs("stepped", 1, 2, filter=RunFilter(tags={"region": "eu"}))
        assert sorted(by_filter.moved) == sorted(h.id for h in eu)
        assert by_filter.skipped == []
        assert [h.result(timeout=60) for h in eu] == ["v2 eu"] * 3
        assert {two.get_run(h.id).version for h in us} == {1}

        pinned = two.move_runs("stepped", 1, 2, runs=[recorded.id])
        assert (pinned.moved, pinned.skipped) == ([], [SkippedRun(recorded.id, "recorded")])

        preview = two.move_runs("stepped", 1, 2, dry_run=True)
        assert sorted(preview.moved) == sorted(h.id for h in us)
        assert preview.skipped == [SkippedRun(recorded.id, "recorded")]
        assert {two.get_run(h.id).version for h in us} == {1}
        assert two.stranded() == [StrandedVersion("stepped", 1, 3, ["stepped"], [2])]

    untouched = two.get_run(recorded.id)
    assert (untouched.version, untouched.status) == (1, perdure.RunStatus.WAITING)
    assert [e.event for e in two.history(recorded.id)] == history_before
    assert (
        db.execute(
            "SELECT position, name, status FROM steps WHERE run_id = %s ORDER BY position",
            [recorded.id],
        ).fetchall()
        == steps_before
    )


def test_bad_moves_are_refused_with_nothing_written(
    make_app: Callable[..., perdure.App], pg_url: str, schema: str
) -> None:
    app = make_app()
    stepped(app, 1)
    run = app.start("stepped", "x")
    with pytest.raises(perdure.ConfigurationError, match="both 1"):
        app.move_runs("stepped", 1, 1)
    with pytest.raises(perdure.UnknownWorkflow, match="version 9"):
        app.move_runs("stepped", 1, 9)
    with pytest.raises(perdure.ConfigurationError, match="to_version"):
        app.move_runs("stepped", 1, 0)
    with pytest.raises(perdure.ConfigurationError, match="run id"):
        app.move_runs("stepped", 1, 2, runs=["not-a-run"])
    with pytest.raises(perdure.ConfigurationError, match="another workflow"):
        app.move_runs("stepped", 1, 2, filter=RunFilter(workflow="other"))
    refused = CliRunner().invoke(
        cli,
        ["--database-url", pg_url, "--schema", schema, "runs", "move-version", *BAD],
    )
    assert refused.exit_code == 1
    assert "version 7" in refused.output
    assert "Traceback" not in refused.output
    assert app.get_run(run.id).version == 1
    assert [e.event for e in app.history(run.id)] == ["run_created"]
