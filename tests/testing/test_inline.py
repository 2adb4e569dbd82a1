"""perdure.testing: inline runs and the virtual clock, on the real PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import pytest

import perdure
from perdure import testing


def test_a_week_long_sleep_finishes_at_once_with_the_virtual_clock(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)

    @app.workflow("trial")
    async def trial(ctx: perdure.Context, user: str) -> str:
        await ctx.step("welcome", lambda: f"welcome {user}")
        await ctx.sleep(7 * 86400)
        return await ctx.step("convert", lambda: f"trial over for {user}")

    started = time.monotonic()
    handle = app.start("trial", "ada")
    testing.drain(app)
    assert handle.status() == "waiting"
    assert testing.step_names(app, handle) == ["welcome", "sleep"]
    clock.advance(days=6, hours=23)
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)
    clock.advance(hours=1)
    assert app.run_until_complete(handle) == "trial over for ada"
    # The week is skipped, not waited (the bound is loose: a machine under
    # load is slow, but not by a week).
    assert time.monotonic() - started < 120
    testing.assert_step_ran(app, handle, "welcome")
    testing.assert_step_ran(app, handle, "convert")


def test_retry_backoff_and_signal_timeout_follow_the_virtual_clock(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("try later")
        return "ok"

    policy = perdure.RetryPolicy(max_attempts=2, initial_delay=3600, jitter=0)

    @app.workflow("patient")
    async def patient(ctx: perdure.Context) -> list[str]:
        first = await ctx.step("flaky", flaky, retry=policy)
        try:
            await ctx.wait_for_signal("reply", timeout=86400)
            second = "replied"
        except perdure.SignalTimeout:
            second = "timed out"
        return [first, second]

    handle = app.start("patient")
    testing.drain(app)
    assert calls == [1]  # the retry waits an hour of virtual time
    clock.advance(hours=1)
    testing.drain(app)
    assert calls == [1, 1] and handle.status() == "waiting"
    clock.advance(days=1)
    assert app.run_until_complete(handle) == ["ok", "timed out"]


def test_assert_step_ran_explains_what_was_recorded(app: perdure.App) -> None:
    @app.workflow("one")
    async def one(ctx: perdure.Context) -> None:
        await ctx.step("only", lambda: None)

    handle = app.start("one")
    app.run_until_complete(handle)
    with pytest.raises(AssertionError, match=r"no step 'missing'; recorded steps: only\(completed"):
        testing.assert_step_ran(app, handle, "missing")
    with pytest.raises(AssertionError, match="expected completed after 2 attempt"):
        testing.assert_step_ran(app, handle, "only", times=2)


def test_crash_after_a_checkpoint_then_recovery_skips_the_committed_step(
    make_app: Any,
) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    charged: list[int] = []

    @app.workflow("order")
    async def order(ctx: perdure.Context, n: int) -> str:
        await ctx.step("charge_card", lambda: charged.append(n) or "ch_1")
        return await ctx.step("ship", lambda: "shipped")

    handle = app.start("order", 7)
    with testing.crash_after(step="charge_card") as fault:
        testing.drain(app, lease_seconds=30)
    assert fault.hits == 1 and handle.status() == "running"
    assert testing.step_names(app, handle) == ["charge_card"]
    clock.advance(seconds=31)  # the dead worker's lease lapses
    assert app.run_until_complete(handle) == "shipped"
    assert charged == [7]
    assert "lease_expired" in [e.event for e in app.history(handle.id)]


def test_crash_before_the_checkpoint_runs_the_step_again(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    calls: list[int] = []

    @app.workflow("twice")
    async def twice(ctx: perdure.Context) -> int:
        return await ctx.step("effect", lambda: calls.append(1) or len(calls))

    handle = app.start("twice")
    with testing.crash_after(step="effect", before=True):
        testing.drain(app, lease_seconds=30)
    assert testing.step_names(app, handle) == []
    clock.advance(seconds=31)
    assert app.run_until_complete(handle) == 2
    assert len(calls) == 2


def test_fail_step_forces_retries_with_their_counts(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    policy = perdure.RetryPolicy(max_attempts=4, initial_delay=10, jitter=0)

    @app.workflow("resilient")
    async def resilient(ctx: perdure.Context) -> str:
        return await ctx.step("call_api", lambda: "ok", retry=policy)

    handle = app.start("resilient")
    with testing.fail_step("call_api", times=2) as fault:
        testing.drain(app)
        clock.advance(seconds=10)
        testing.drain(app)
        clock.advance(seconds=20)
        assert app.run_until_complete(handle) == "ok"
    assert fault.hits == 2
    testing.assert_step_ran(app, handle, "call_api", times=3)
