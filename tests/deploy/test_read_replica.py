"""Reading from a hot standby: the dashboard and read-only CLI commands, with the lag shown."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import psycopg

import perdure
from deploy.replicated import ReplicatedPair
from helpers import wait_until
from perdure.dashboard.config import DashboardConfig
from perdure.dashboard.server import BackgroundServer

SCHEMA = "replica"


def test_reads_from_the_standby_and_actions_on_the_primary(pair: ReplicatedPair) -> None:
    app = perdure.App(pair.primary.url, schema=SCHEMA)

    @app.workflow("waiting")
    async def waiting(ctx: perdure.Context) -> object:
        return await ctx.wait_for_signal("go")

    reader = perdure.App(pair.standby.url, schema=SCHEMA, auto_migrate=False)
    try:
        app.register()
        run = app.start("waiting", key="on-the-primary")
        wait_until(lambda: _on_standby(pair, run.id), 30, what="the run to reach the standby")

        listed = _cli(pair, "--read-url", pair.standby.url, "runs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        page = json.loads(listed.stdout)
        assert run.id in {r["id"] for r in page["runs"]}
        # With --json the standby's lag is in the document, and stderr stays empty.
        assert isinstance(page["read_from"]["lag_seconds"], float) and listed.stderr == ""
        # An action goes to the primary, whatever --read-url says.
        sent = _cli(pair, "--read-url", pair.standby.url, "runs", "signal", run.id, "go")
        assert sent.returncode == 0, sent.stderr
        with psycopg.connect(pair.primary.url) as conn:
            row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.signals").fetchone()
        assert row == (1,)

        server = BackgroundServer(app, DashboardConfig(port=0), reader=reader)
        try:
            server.wait_started()
            with urllib.request.urlopen(f"{server.url.rstrip('/')}/runs", timeout=10) as response:
                page = response.read().decode()
        finally:
            server.stop()
        assert run.id in page
        assert "s behind" in page and "replica" in page
    finally:
        reader.close()
        app.close()


def _on_standby(pair: ReplicatedPair, run_id: str) -> bool:
    with psycopg.connect(pair.standby.url) as conn:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.runs",)).fetchone()
        if not found or not found[0]:
            return False
        row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.runs WHERE id = %s", (run_id,))
        return row.fetchone() == (1,)


def _cli(pair: ReplicatedPair, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "perdure",
            "--database-url",
            pair.primary.url,
            "--schema",
            SCHEMA,
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
