"""A Node.js client (node-postgres and fetch) starts, signals, streams and awaits runs."""

from __future__ import annotations

import os
import subprocess

from crosslang.conftest import HERE, Served


def run_node(node: str, script: str, served: Served) -> subprocess.CompletedProcess[str]:
    """Run a Node script of tests/crosslang with the connection details in its environment."""
    env = {
        **os.environ,
        "DATABASE_URL": served.database_url,
        "PERDURE_SCHEMA": served.schema,
        "PERDURE_API": served.api,
        "PERDURE_TOKEN": served.token,
    }
    return subprocess.run(
        [node, script], cwd=HERE, env=env, capture_output=True, text=True, timeout=120
    )


def test_node_client_drives_a_run_through_sql_and_http(node: str, served: Served) -> None:
    done = run_node(node, "client.mjs", served)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert 'sql: stream words = ["hello","from node-postgres"]' in lines
    assert 'sql: run completed, output = {"got":"from node-postgres"}' in lines
    assert 'http: SSE words = ["hello","from fetch"]' in lines
    assert 'http: run completed, output = {"got":"from fetch"}' in lines
    assert lines[-1] == "node client: all checks passed"
