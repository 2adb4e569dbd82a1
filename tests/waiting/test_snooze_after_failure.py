"""A step that failed once and then snoozes: the snooze does not count, the failure does."""

from __future__ import annotations

from typing import Any

import perdure
from helpers import BackgroundWorker

FAST = {"concurrency": 2, "poll_seconds": 0.05, "lease_seconds": 5}


def test_a_snooze_after_a_failed_attempt_keeps_the_count_of_failures(app: perdure.App) -> None:
    calls: list[int] = []

    def flaky_then_busy() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first call fails")
        if len(calls) == 2:
            return perdure.Snooze(0.05, reason="busy")
        return "served"

    @app.workflow("patient")
    async def patient(ctx: perdure.Context) -> Any:
        retry = perdure.RetryPolicy(max_attempts=3, initial_delay=0.05)
        return await ctx.step("call", flaky_then_busy, retry=retry)

    handle = app.start("patient")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == "served"
    assert len(calls) == 3
    (step,) = app.steps(handle.id)
    # Three calls: one failure, one snooze (not counted), one success.
    assert (step.status, step.attempts) == ("completed", 2)
    events = [e.event for e in app.history(handle.id)]
    assert events.count("step_snoozed") == 1 and "step_retry_scheduled" in events
