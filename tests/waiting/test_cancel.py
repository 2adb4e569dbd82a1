"""Cancellation in every state: final status, the reason in history, no step after it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker, wait_until

FAST = {"concurrency": 2, "poll_seconds": 0.05, "lease_seconds": 5}


def _assert_cancelled(app: perdure.App, run_id: str, reason: str) -> None:
    run = app.get_run(run_id)
    assert run.status == "cancelled"
    cancels = [e for e in app.history(run_id) if e.event == "run_cancelled"]
    assert len(cancels) == 1 and cancels[0].detail == {"reason": reason}


def test_cancel_a_queued_run(app: perdure.App) -> None:
    @app.workflow("queued")
    async def queued(ctx: perdure.Context) -> None:
        await ctx.step("never", lambda: None)

    handle = app.start("queued")
    app.cancel(handle.id, reason="not needed")
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: worker.count("worker_idle") >= 1, 20, what="an idle claim")
    _assert_cancelled(app, handle.id, "not needed")
    assert app.steps(handle.id) == []


def test_cancel_mid_step_lets_the_step_finish_and_stops_before_the_next(
    app: perdure.App,
) -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(20)
        return "finished"

    @app.workflow("midstep")
    async def midstep(ctx: perdure.Context) -> None:
        await ctx.step("slow", slow)
        try:
            await ctx.step("next", lambda: seen.append("next"))
        except perdure.Cancelled as exc:
            seen.append(f"cleanup: {exc.run_id}")
            raise

    handle = app.start("midstep")
    with BackgroundWorker(app, **FAST) as worker:
        assert started.wait(20)
        app.cancel(handle.id, reason="customer left")
        release.set()
        wait_until(lambda: worker.count("execution_finished") >= 1, 20, what="the task to end")
    _assert_cancelled(app, handle.id, "customer left")
    assert seen == [f"cleanup: {handle.id}"]
    assert [(s.name, s.status) for s in app.steps(handle.id)] == [("slow", "completed")]


def test_cancel_a_sleeping_and_a_signal_waiting_run(app: perdure.App) -> None:
    @app.workflow("sleeper")
    async def sleeper(ctx: perdure.Context) -> None:
        await ctx.sleep(3600)
        await ctx.step("after", lambda: None)

    @app.workflow("listener")
    async def listener(ctx: perdure.Context) -> Any:
        return await ctx.wait_for_signal("go")

    sleeping, waiting = app.start("sleeper"), app.start("listener")
    with BackgroundWorker(app, **FAST):
        wait_until(
            lambda: sleeping.status() == "waiting" and waiting.status() == "waiting",
            20,
            what="both runs to wait",
        )
        app.cancel(sleeping.id, reason="deadline moved")
        app.cancel(waiting.id, reason="no longer waiting")
        assert app.cancel(waiting.id, reason="twice").status == "cancelled"  # a no-op
    _assert_cancelled(app, sleeping.id, "deadline moved")
    _assert_cancelled(app, waiting.id, "no longer waiting")
    assert [s.name for s in app.steps(sleeping.id)] == ["sleep"]
    try:
        app.signal(waiting.id, "go")
    except perdure.InvalidRunState as exc:
        assert exc.status == "cancelled"
    else:
        raise AssertionError("a cancelled run accepted a signal")


def test_a_run_past_its_deadline_is_cancelled_with_reason_deadline(app: perdure.App) -> None:
    @app.workflow("slowpoke")
    async def slowpoke(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("never")

    handle = app.start("slowpoke", timeout=0.5)
    with BackgroundWorker(app, **FAST, reap_seconds=0.1):
        with pytest.raises(perdure.RunCancelled):
            handle.result(timeout=20)
    _assert_cancelled(app, handle.id, "deadline")


def test_a_step_timeout_fails_the_attempt_and_is_retried(app: perdure.App) -> None:
    import asyncio

    calls: list[int] = []

    async def sometimes_slow() -> str:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(30)
        return "quick"

    policy = perdure.RetryPolicy(max_attempts=2, initial_delay=0.05)

    @app.workflow("timed")
    async def timed(ctx: perdure.Context) -> str:
        return await ctx.step("call", sometimes_slow, timeout=0.2, retry=policy)

    handle = app.start("timed")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "quick"
    (step,) = app.steps(handle.id)
    assert step.attempts == 2
    retried = [e for e in app.history(handle.id) if e.event == "step_retry_scheduled"]
    assert retried and retried[0].detail is not None
    assert retried[0].detail["type"] == "perdure.errors.StepTimeout"
