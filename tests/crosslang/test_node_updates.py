"""A Node.js client sends an update to a Python run and gets its reply through SQL."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import perdure
from crosslang.conftest import HERE
from helpers import BackgroundWorker, wait_until
from http_api.workload import FAST


def test_node_client_sends_an_update_and_gets_its_reply(
    node: str, app: perdure.App, pg_url: str, schema: str
) -> None:
    @app.workflow("node_cart")
    async def node_cart(ctx: perdure.Context) -> list[str]:
        ctx.state["items"] = []
        await ctx.wait_for_signal("checkout")
        return list(ctx.state["items"])

    @app.update_handler("node_cart")
    async def add_item(ctx: perdure.Context, item: str) -> dict[str, Any]:
        await ctx.step("add", lambda: item)
        ctx.state["items"].append(item)
        return {"count": len(ctx.state["items"]), "item": item}

    @add_item.validator
    def _nonempty(item: Any) -> None:
        if not item:
            raise ValueError("an item is a non-empty string")

    handle = app.start("node_cart", key="node-cart")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", 30, what="the run to wait")
        env = {**os.environ, "DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema, "RUN": "node-cart"}
        done = subprocess.run(
            [node, "updates.mjs"], cwd=HERE, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert 'sql: reply {"item":"from node","count":1}'  # jsonb's key order in lines
        assert "sql: refused with SQLSTATE PU001" in lines
        assert lines[-1] == "node updates: all checks passed"
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["from node"]
    assert [u["status"] for u in app.updates(handle.id)] == ["completed", "rejected"]
