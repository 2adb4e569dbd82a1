"""POST /api/v1/runs/{ref}/updates: an update's reply by long poll, typed refusals."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from http_api.workload import FAST

API = "/api/v1"


def _define(app: perdure.App) -> None:
    @app.workflow("tab")
    async def tab(ctx: perdure.Context) -> int:
        ctx.state["total"] = 0
        await ctx.wait_for_signal("close")
        return int(ctx.state["total"])

    @app.update_handler("tab")
    async def add(ctx: perdure.Context, amount: int) -> int:
        ctx.state["total"] += amount
        return int(ctx.state["total"])

    @add.validator
    def _positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError("an amount is a positive integer")

    @app.update_handler("tab", "fail")
    async def fail(ctx: perdure.Context) -> None:
        raise RuntimeError("no")


def test_an_update_over_http_replies_once_per_id_and_refuses_with_codes(
    client: TestClient, defined: perdure.App
) -> None:
    _define(defined)
    run = client.post(f"{API}/runs", json={"workflow": "tab", "key": "tab:1"}).json()
    url = f"{API}/runs/{run['id']}/updates"
    pending = client.post(url, json={"name": "add", "payload": 5, "update_id": "a", "timeout": 0})
    assert pending.status_code == 202 and pending.json()["status"] == "pending"
    with BackgroundWorker(defined, **FAST):
        wait_until(lambda: defined.get_run("tab:1").status == "waiting", what="the wait")
        done = client.post(url, json={"name": "add", "payload": 5, "update_id": "a"})
        assert done.status_code == 200
        assert done.json() == {
            "run": run["id"],
            "name": "add",
            "update_id": "a",
            "status": "completed",
            "reply": 5,
        }
        again = client.post(url, json={"name": "add", "payload": 5, "update_id": "a"})
        assert again.json()["reply"] == 5
        refused = client.post(url, json={"name": "add", "payload": -1})
        assert (refused.status_code, refused.json()["code"]) == (422, "update-rejected")
        failed = client.post(url, json={"name": "fail"})
        assert (failed.status_code, failed.json()["code"]) == (409, "update-failed")
        more = client.post(url, json={"name": "add", "payload": 2})
        assert more.json()["reply"] == 7
        client.post(f"{API}/runs/{run['id']}/signals", json={"name": "close"})
        assert defined.handle(run["id"]).result(timeout=30) == 7
    for body, code in [
        ({}, "invalid-argument"),
        ({"name": "add", "extra": 1}, "invalid-argument"),
        ({"name": "add", "timeout": 301}, "invalid-argument"),
        ({"name": "add", "timeout": "soon"}, "invalid-argument"),
        ({"name": "bad name!"}, "invalid-argument"),
    ]:
        answer = client.post(url, json=body)
        assert (answer.status_code, answer.json()["code"]) == (400, code), body
    missing = client.post(f"{API}/runs/nope/updates", json={"name": "add", "payload": 1})
    assert (missing.status_code, missing.json()["code"]) == (404, "run-not-found")
    finished = client.post(url, json={"name": "add", "payload": 1})
    assert (finished.status_code, finished.json()["code"]) == (409, "invalid-run-state")
