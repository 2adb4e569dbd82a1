"""A step's log records on the run page, under the step, each attempt apart."""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.testclient import TestClient

import perdure
from dashboard.workload import SCRIPT
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain


def test_the_run_page_shows_each_attempts_records_under_its_step(app: perdure.App) -> None:
    steplog = logging.getLogger("board.steps")
    steplog.setLevel(logging.INFO)
    tries = {"n": 0}

    def charge() -> str:
        tries["n"] += 1
        steplog.info("charging, try %s", tries["n"])
        if tries["n"] == 1:
            steplog.warning("declined: %s", SCRIPT)
            raise RuntimeError("declined")
        return "ok"

    @app.workflow("billing")
    async def billing(ctx: perdure.Context, _: Any) -> str:
        await ctx.step("quiet", lambda: 1)
        return await ctx.step(
            "charge", charge, retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0)
        )

    run = app.start("billing", None)
    drain(app)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        page = client.get(f"/runs/{run.id}").text
    assert 'data-logs="quiet"' not in page  # a step that logged nothing shows no logs
    row = re.search(r'<tr class="step-logs" data-logs="charge">(.*?)</tr>', page, re.S)
    assert row is not None
    shown = row.group(1)
    assert "logs · 3 records in 2 attempts" in shown
    first, second = shown.split('data-attempt="2"')
    assert "attempt 1 · retrying" in first and "charging, try 1" in first
    assert "WARNING" in first and "declined: &lt;script&gt;" in first
    assert "charging, try 2" in second and "try 1" not in second
    assert SCRIPT not in page  # the message is escaped, never run
