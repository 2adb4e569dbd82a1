"""Runs are pinned to their version, across real worker processes.

Two `perdure worker` processes serve different versions of workflow "pinned"
(tests/apps/versioned_app.py): each version's runs go only to the worker that
has it; a version nobody has waits, visibly, until a worker with it starts.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

import perdure
from apps import versioned_app
from helpers import WorkerProcess, wait_until
from perdure.cli.main import cli

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

TARGET = "apps.versioned_app:app"


def serve(spawn_worker: Any, app: perdure.App, versions: str) -> tuple[WorkerProcess, str]:
    """Start a worker process with ``versions``; return it and its worker id once it serves."""
    proc = spawn_worker(TARGET, "--poll-seconds", "0.2", VERSIONED_APP_VERSIONS=versions)
    found = wait_until(
        lambda: [w.id for w in app.workers() if w.pid == proc.pid and w.status == "running"],
        60,
        what=f"the worker with versions {versions} to serve",
    )
    return proc, found[0]


def test_each_version_runs_only_on_a_worker_that_has_it(
    make_app: Callable[..., perdure.App], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    app = make_app()
    versioned_app.define(app, [1, 2, 3])
    cli_base = ["--database-url", pg_url, "--schema", schema]
    # Version 3's runs are first in the queue: the workers pass over them.
    v3 = [app.start("pinned", i, version=3) for i in range(2)]
    v1 = [app.start("pinned", i, version=1) for i in range(4)]
    v2 = [app.start("pinned", i, version=2) for i in range(4)]
    one, one_id = serve(spawn_worker, app, "1")
    two, two_id = serve(spawn_worker, app, "2")

    assert [h.result(timeout=60) for h in v1] == [{"version": 1, "pid": one.pid}] * 4
    assert [h.result(timeout=60) for h in v2] == [{"version": 2, "pid": two.pid}] * 4

    # Without a version, a start takes the newest registered in the database,
    # even from code that has only version 1.
    older = make_app()
    versioned_app.define(older, [1])
    unpinned = older.start("pinned", "newest")
    assert older.get_run(unpinned.id).version == 2
    assert unpinned.result(timeout=60) == {"version": 2, "pid": two.pid}

    # Version 3 waits, and says for what.
    for handle in v3:
        run = app.get_run(handle.id)
        assert (run.status, run.worker_id) == (perdure.RunStatus.QUEUED, None)
        assert [e.event for e in app.history(handle.id)] == ["run_created"]
    listed = CliRunner().invoke(cli, [*cli_base, "runs", "list", "--status", "queued"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("no worker has v3") == 2
    shown = CliRunner().invoke(cli, [*cli_base, "runs", "show", v3[0].id])
    assert shown.exit_code == 0, shown.output
    assert "a worker with pinned version 3 (no live worker has it)" in shown.output

    # `perdure workflows list` tells who serves which version, and the counts.
    table = CliRunner().invoke(cli, [*cli_base, "workflows", "list", "--json"])
    assert table.exit_code == 0, table.output
    served = {(w["name"], w["version"]): w for w in json.loads(table.output)}
    assert served["pinned", 1]["workers"] == [one_id]
    assert served["pinned", 2]["workers"] == [two_id]
    assert served["pinned", 2]["counts"] == {"completed": 5}
    assert served["pinned", 1]["queue"] == "pinned"
    shown_table = CliRunner().invoke(cli, [*cli_base, "workflows", "list"])
    assert one_id[:10] in shown_table.output and two_id[:10] in shown_table.output

    # A worker with version 3 starts: the waiting runs go to it, and only to it.
    three, three_id = serve(spawn_worker, app, "3")
    assert [h.result(timeout=60) for h in v3] == [{"version": 3, "pid": three.pid}] * 2
    served_now = {(w.name, w.version): w.workers for w in app.workflows()}
    assert served_now["pinned", 3] == [three_id]

    # A worker that stops no longer serves its version.
    one.signal(signal.SIGINT)
    assert one.wait(30) == 0
    wait_until(
        lambda: {(w.name, w.version): w.workers for w in app.workflows()}["pinned", 1] == [],
        30,
        what="version 1 to have no live worker",
    )
