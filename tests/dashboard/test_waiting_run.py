"""A run waiting for a signal, as the tutorial's stage 7 leaves it: the run page's
statements agree with each other, before and after a signal sent with no worker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain

LOCAL = "http://127.0.0.1"
TWO_DAYS = 2 * 86400


@pytest.fixture
def orders(pg_url: str, schema: str) -> Iterator[perdure.App]:
    """An App with the tutorial's order workflow, cut to its shape: steps, then a wait."""
    made = perdure.App(pg_url, schema=schema)

    @made.workflow("order")
    async def order(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
        await ctx.gather(
            ctx.step("reserve_stock", lambda: "hold"), ctx.step("charge_card", lambda: "charge")
        )
        await ctx.map("pick_item", lambda sku: f"bin-{sku}", order["items"])
        try:
            parcel = await ctx.wait_for_signal("packed", timeout=TWO_DAYS)
        except perdure.SignalTimeout:
            return {"status": "refunded"}
        return {"status": "shipped", "parcel": parcel}

    made.register()
    yield made
    made.close()


def facts(html: str) -> dict[str, str]:
    """The run page's facts (``<dt>`` → text of its ``<dd>``), tags stripped."""
    pairs = re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", html, re.S)
    return {k: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", v)).strip() for k, v in pairs}


def test_stage_7_a_signal_sent_with_no_worker_says_so_and_the_page_agrees(
    orders: perdure.App,
) -> None:
    app = orders
    run = app.start("order", {"id": 70, "items": ["tea", "mug"]}, key="order-70")
    drain(app)  # a worker until the run waits for 'packed', then none
    assert run.status() == "waiting"
    with TestClient(create_app(app, DashboardConfig()), base_url=LOCAL) as client:
        waiting = client.get(f"/runs/{run.id}")
        shown = facts(waiting.text)
        assert "waiting" in re.search(r"<h1>.*?</h1>", waiting.text, re.S).group(0)  # type: ignore[union-attr]
        # Every recorded step completed, but the run is not done: not "4 / 4 completed".
        assert shown["steps"] == "4 completed · waiting for signal packed"
        assert "/ 4 completed" not in waiting.text
        assert shown["waiting for"].startswith("signal packed · times out in 1 d")

        sent = client.post(
            f"/runs/{run.id}/signal",
            data={"csrf": client.cookies["perdure_csrf"], "name": "packed", "payload": "{}"},
        )
        assert sent.status_code == 200
        page = sent.text
        after = facts(page)
    # The record still says waiting until a worker claims the run; the signal
    # completed the wait step, so the run is due: the page says queued.
    assert {s.name: s.status.value for s in app.steps(run.id)}["signal:packed"] == "completed"
    assert "Signal sent." not in page
    assert (
        "Signal recorded; no worker is running queue order: start one with "
        "perdure worker" in re.sub(r"<[^>]+>", "", page)
    )
    assert "queued" in re.search(r"<h1>.*?</h1>", page, re.S).group(0)  # type: ignore[union-attr]
    assert "waiting for" not in after and "due in" not in page and "times out" not in page
    assert after["steps"] == "5 completed · next: a worker claims the run"
    assert "/ 4 completed" not in page


def test_with_a_worker_on_the_queue_the_signal_is_sent_and_no_warning_shows(
    defined: perdure.App, worker: BackgroundWorker
) -> None:
    run = defined.start("approval", {"doc": 1})
    wait_until(lambda: run.status() == "waiting", timeout=20)
    with TestClient(create_app(defined, DashboardConfig()), base_url=LOCAL) as client:
        client.get("/")
        page = client.post(
            f"/runs/{run.id}/signal",
            data={"csrf": client.cookies["perdure_csrf"], "name": "approve", "payload": "true"},
        ).text
    assert "Signal sent." in page
    assert 'id="idle"' not in page and "no worker is running" not in page.lower()


def test_a_queued_run_no_worker_serves_says_how_to_start_one(defined: perdure.App) -> None:
    run = defined.start("greet", "ada")
    with TestClient(create_app(defined, DashboardConfig()), base_url=LOCAL) as client:
        page = client.get(f"/runs/{run.id}").text
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page)).replace("&#39;", "'")
    queue = defined.get_run(run.id).queue
    assert f"No worker is running queue {queue} with this workflow's code" in text
    assert "0 completed · next: a worker claims the run" in text
