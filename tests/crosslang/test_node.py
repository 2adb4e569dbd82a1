"""A Node.js client (node-postgres and fetch) starts, signals, streams and awaits runs."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import perdure
from crosslang.conftest import HERE, Served
from helpers import BackgroundWorker, wait_until
from http_api.workload import FAST


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


def test_node_client_emits_an_event_a_python_run_waits_for(
    node: str, app: perdure.App, pg_url: str, schema: str
) -> None:
    @app.workflow("await_node_payment")
    async def await_node_payment(ctx: perdure.Context, order: int) -> dict[str, Any]:
        event = await ctx.wait_for_event("order.paid", {"order_id": order}, timeout=120)
        return {"key": event.key, "payload": event.payload}

    handle = app.start("await_node_payment", 77)
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 30, what="the run to wait")
        env = {**os.environ, "DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema, "ORDER_ID": "77"}
        done = subprocess.run(
            [node, "events.mjs"], cwd=HERE, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == "node events: all checks passed"
        assert handle.result(timeout=30) == {
            "key": "node-paid-77",
            "payload": {"order_id": 77, "amount": 42, "via": "node-postgres"},
        }
    (event,) = app.emitted_events("order.paid")
    assert event["woke"] == [handle.id]
