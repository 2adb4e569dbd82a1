"""``perdure_events_recent``: the events of the last five minutes, in, matched and unmatched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import perdure
from helpers import BackgroundWorker, wait_until
from observability.test_metrics import OPTIONS, metrics_of, scrape, value


def test_events_in_matched_and_unmatched(app: perdure.App, make_app: Any) -> None:
    @app.workflow("await_paid")
    async def await_paid(ctx: perdure.Context, order: int) -> int:
        event = await ctx.wait_for_event("paid", {"order": order}, timeout=600)
        return int(event.payload["order"])

    @app.workflow("on_refund", on_event="refunded")
    async def on_refund(ctx: perdure.Context, payload: Any) -> None:
        return None

    # An event of an hour ago is outside the window.
    make_app(clock=perdure.VirtualClock(datetime.now(UTC) - timedelta(hours=1))).emit("old")
    handle = app.start("await_paid", 1)
    with BackgroundWorker(app, metrics_port=0, **OPTIONS) as worker:
        port = wait_until(lambda: metrics_of(worker).port, what="the metrics endpoint")
        wait_until(lambda: handle.status() == "waiting", 20, what="the wait")
        app.emit("paid", {"order": 1})  # wakes the run
        app.emit("refunded", {"order": 2})  # starts a run
        app.emit("paid", {"order": 3})  # reaches nothing
        assert handle.result(timeout=20) == 1
        samples = scrape(port)
    assert value(samples, "perdure_events_recent", outcome="in") == 3
    assert value(samples, "perdure_events_recent", outcome="matched") == 2
    assert value(samples, "perdure_events_recent", outcome="unmatched") == 1
