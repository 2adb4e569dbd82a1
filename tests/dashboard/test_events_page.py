"""The dashboard's Events page: the latest emitted events and the runs each woke or started."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

import perdure
from dashboard.workload import SCRIPT
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain


def test_events_page_lists_events_with_the_runs_they_woke_and_started(app: perdure.App) -> None:
    @app.workflow("await_paid")
    async def await_paid(ctx: perdure.Context, order: int) -> None:
        await ctx.wait_for_event("paid", {"order": order}, timeout=600)

    @app.workflow("on_paid", on_event=perdure.EventTrigger("paid", {"vip": True}))
    async def on_paid(ctx: perdure.Context, payload: Any) -> None:
        return None

    waiting = app.start("await_paid", 1)
    drain(app)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        run_page = client.get(f"/runs/{waiting.id}").text
    # A waiting run says what it waits for: the event, its match, its deadline.
    assert "event paid matching {&#34;order&#34;: 1} · times out in" in run_page
    woke_id = app.emit("paid", {"order": 1, "vip": True, "note": SCRIPT}, key="delivery-1")
    quiet_id = app.emit("paid", {"order": 2})
    (started,) = app.list_runs(workflow="on_paid")
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        page = client.get("/events")
        workflows = client.get("/workflows").text
    assert page.status_code == 200
    text = page.text
    assert 'href="/events" class="on"' in text
    rows = dict(re.findall(r'<tr data-event="(\d+)">(.*?)</tr>', text, re.S))
    assert list(rows) == [str(quiet_id), str(woke_id)]  # newest first
    woke_row = rows[str(woke_id)]
    assert f'href="/runs/{waiting.id}"' in woke_row.split('class="started"')[0]
    assert f'href="/runs/{started.id}"' in woke_row.split('class="started"')[1]
    assert "delivery-1" in woke_row
    assert "/runs/" not in rows[str(quiet_id)]
    assert SCRIPT not in text  # the payload is escaped, never run
    assert "started by event" in workflows and "paid" in workflows


def test_events_page_without_events(app: perdure.App) -> None:
    app.ensure_schema()
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        assert "No event emitted yet." in client.get("/events").text
