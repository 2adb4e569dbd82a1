"""Parallel steps in function workflows: ctx.gather, ctx.map, fail-fast, replay."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}


def test_gather_runs_steps_as_separate_tasks_and_returns_results_in_order(
    app: perdure.App,
) -> None:
    @app.workflow("pair")
    async def pair(ctx: perdure.Context, n: int) -> dict[str, Any]:
        first = await ctx.step("first", lambda: n)
        a, b = await ctx.gather(ctx.step("a", lambda: n + 1), ctx.step("b", lambda: n + 2))
        last = await ctx.step("last", lambda: a + b)
        return {"first": first, "a": a, "b": b, "last": last}

    handle = app.start("pair", 10)
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == {"first": 10, "a": 11, "b": 12, "last": 23}
    steps = app.steps(handle.id)
    assert [(s.position, s.name, s.kind, s.status.value) for s in steps] == [
        (0, "first", "step", "completed"),
        (1, "a", "step", "completed"),
        (2, "b", "step", "completed"),
        (4, "last", "step", "completed"),
    ]
    events = [(e.event, e.step_name) for e in app.history(handle.id)]
    assert ("steps_scheduled", None) in events
    assert ("step_claimed", "a") in events and ("step_claimed", "b") in events


def test_sync_workflow_gathers_branches_and_maps(app: perdure.App) -> None:
    @app.workflow("sync_fan")
    def sync_fan(ctx: perdure.SyncContext, items: list[int]) -> list[Any]:
        pair = ctx.gather(ctx.branch("x", lambda: "x"), ctx.branch("y", lambda: "y"))
        squares = ctx.map("square", lambda v: v * v, items)
        return [pair, squares]

    handle = app.start("sync_fan", [1, 2, 3])
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == [["x", "y"], [1, 4, 9]]
    names = [s.name for s in app.steps(handle.id)]
    assert names == ["x", "y", "square[0]", "square[1]", "square[2]"]


def test_a_map_runs_its_steps_in_the_one_slot_of_its_run(app: perdure.App) -> None:
    release = threading.Event()
    entered: list[int] = []

    def slow(v: int) -> int:
        entered.append(v)
        release.wait(20)
        return v * 2

    @app.workflow("fan")
    async def fan(ctx: perdure.Context, n: int) -> int:
        doubled = await ctx.map("double", slow, range(n))
        return sum(doubled)

    handle = app.start("fan", 5)
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: len(entered) == 5, 20, what="5 steps running")
        # The worker that reached the map runs its steps itself, without a
        # slot (or a replay of the workflow) for each.
        assert [h.task.kind for h in worker.worker.running.values()] == ["run"]
        release.set()
        assert handle.result(timeout=30) == 2 * sum(range(5))
    assert sorted(entered) == list(range(5))


def test_gather_fails_fast_and_the_choice_replays(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    release = threading.Event()
    caught_each_time: list[str] = []
    boom_calls: list[int] = []

    def boom() -> None:
        boom_calls.append(1)
        raise perdure.PermanentError("no")

    def slow() -> str:
        release.wait(20)
        return "slow done"

    @app.workflow("failfast")
    async def failfast(ctx: perdure.Context) -> str:
        try:
            await ctx.gather(ctx.step("slow", slow), ctx.step("boom", boom))
        except perdure.StepFailed as exc:
            caught = exc.step
        caught_each_time.append(caught)
        await ctx.step("after", lambda: "after")
        await ctx.wait_for_signal("go")
        return caught

    handle = app.start("failfast")
    with BackgroundWorker(app, **FAST):
        try:
            wait_until(
                lambda: any(s.name == "signal:go" for s in app.steps(handle.id)),
                30,
                what="the run to wait for its signal",
            )
        finally:
            # "slow" finishes after the gather chose to fail.
            release.set()
        wait_until(
            lambda: _status(app, handle.id, "slow") == perdure.StepStatus.COMPLETED,
            30,
            what="the slow step to be recorded",
        )
    # Its late completion left the run waiting for its signal, not woken.
    assert caught_each_time == ["boom"]
    with psycopg.connect(pg_url, autocommit=True) as db:
        due = db.execute(
            f"SELECT available_at <= now() FROM {schema}.tasks WHERE run_id = %s AND kind = 'run'",
            (handle.id,),
        ).fetchall()
    assert due == [(False,)]
    # A fresh worker replays the run from history: the gather must make the
    # same choice, not see two finished branches.
    app.signal(handle.id, "go")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == "boom"
    assert caught_each_time == ["boom", "boom"]
    assert boom_calls == [1]
    steps = {s.name: s for s in app.steps(handle.id)}
    assert steps["boom"].status == perdure.StepStatus.FAILED
    assert steps["gather:2"].output == {"failed": 1}
    assert steps["after"].status == perdure.StepStatus.COMPLETED


def _status(app: perdure.App, run_id: str, step: str) -> perdure.StepStatus | None:
    """The status of the step named ``step`` of run ``run_id``, if it has a row."""
    return next((s.status for s in app.steps(run_id) if s.name == step), None)


def _failing_fast(app: perdure.App, release: threading.Event) -> perdure.RunHandle[str]:
    """A run whose gather fails fast while its other step waits for ``release``."""

    def boom() -> None:
        raise perdure.PermanentError("no")

    def slow() -> str:
        release.wait(30)
        return "slow done"

    @app.workflow("failfast_stop")
    async def failfast_stop(ctx: perdure.Context) -> str:
        try:
            await ctx.gather(ctx.step("slow", slow), ctx.step("boom", boom))
        except perdure.StepFailed as exc:
            await ctx.wait_for_signal("go")
            return exc.step
        return "no failure"

    return app.start("failfast_stop")


def _open_transactions(pg_url: str, worker_id: str) -> list[tuple[str, str]]:
    """The worker's connections still inside a transaction: (state, last query)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT state, query FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND state LIKE 'idle in transaction%%'",
            (f"perdure-worker-{worker_id}"[:50] + "%",),
        ).fetchall()
    return [(str(state), str(query)) for state, query in rows]


def test_a_stopping_worker_finishes_a_failed_gathers_steps_still_running(
    app: perdure.App, pg_url: str
) -> None:
    release = threading.Event()
    handle = _failing_fast(app, release)
    background = BackgroundWorker(app, **FAST)
    try:
        wait_until(
            lambda: any(s.name == "signal:go" for s in app.steps(handle.id)),
            30,
            what="the run to wait for its signal",
        )
        assert _status(app, handle.id, "slow") == perdure.StepStatus.PENDING
        # The worker, asked to stop, waits for the step still running (within
        # its shutdown_seconds) and records it before run() returns.
        background.loop.call_soon_threadsafe(background.worker.request_stop)
        background.thread.join(1.0)
        assert background.thread.is_alive()
        release.set()
        background.stop()
    finally:
        release.set()
        background.stop()
    steps = {s.name: s for s in app.steps(handle.id)}
    assert steps["slow"].status == perdure.StepStatus.COMPLETED
    assert steps["slow"].output == "slow done"
    assert _open_transactions(pg_url, background.worker.id) == []
    app.signal(handle.id, "go")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == "boom"


def test_a_stopped_worker_leaves_no_transaction_of_a_batch_open(
    app: perdure.App, pg_url: str
) -> None:
    release = threading.Event()
    handle = _failing_fast(app, release)
    background = BackgroundWorker(app, **{**FAST, "shutdown_seconds": 0.2})
    try:
        wait_until(
            lambda: any(s.name == "signal:go" for s in app.steps(handle.id)),
            30,
            what="the run to wait for its signal",
        )
        # The step still running outlives the worker's grace period: the
        # worker cancels its batch and stops; the step is released after.
        background.stop()
    finally:
        release.set()
        background.stop()
    assert _open_transactions(pg_url, background.worker.id) == []
    # Nothing holds the run's row: a signal and a fresh worker finish it.
    app.signal(handle.id, "go")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == "boom"


def test_return_exceptions_waits_for_all_and_returns_failures(app: perdure.App) -> None:
    def boom() -> None:
        raise perdure.PermanentError("nope")

    @app.workflow("collect")
    async def collect(ctx: perdure.Context) -> list[str]:
        results = await ctx.gather(
            ctx.step("ok", lambda: "fine"), ctx.step("bad", boom), return_exceptions=True
        )
        return [r if isinstance(r, str) else type(r).__name__ for r in results]

    handle = app.start("collect")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == ["fine", "StepFailed"]


def test_a_failed_branch_retries_with_its_policy(app: perdure.App) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("transient")
        return "ok"

    policy = perdure.RetryPolicy(max_attempts=3, initial_delay=0.01, jitter=0)

    @app.workflow("retrying_branch")
    async def retrying_branch(ctx: perdure.Context) -> list[str]:
        return await ctx.gather(ctx.step("flaky", flaky, retry=policy), ctx.step("ok", lambda: "x"))

    handle = app.start("retrying_branch")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == ["ok", "x"]
    assert len(attempts) == 3
    assert {s.name: s.attempts for s in app.steps(handle.id)}["flaky"] == 3


def test_gather_refuses_what_is_not_a_step_of_this_run(app: perdure.App) -> None:
    @app.workflow("bad_gather")
    async def bad_gather(ctx: perdure.Context) -> None:
        await ctx.gather(lambda: 1)  # type: ignore[arg-type]

    handle = app.start("bad_gather")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed, match="gather takes steps"):
            handle.result(timeout=30)


def test_retrying_a_run_that_failed_fast_reruns_the_failed_step(app: perdure.App) -> None:
    fixed = {"yes": False}

    def fragile() -> str:
        if not fixed["yes"]:
            raise perdure.PermanentError("not yet")
        return "fixed"

    release = threading.Event()

    def slow_ok() -> str:
        release.wait(20)
        return "ok"

    @app.workflow("refan")
    async def refan(ctx: perdure.Context) -> list[str]:
        return await ctx.gather(ctx.step("ok", slow_ok), ctx.step("fragile", fragile))

    handle = app.start("refan")
    with BackgroundWorker(app, **FAST) as worker:
        with pytest.raises(perdure.RunFailed, match="not yet"):
            handle.result(timeout=30)
        release.set()
        wait_until(lambda: not worker.worker.running, 20, what="the slow step to finish")
        assert {s.name for s in app.steps(handle.id)} == {"ok", "fragile", "gather:2"}
        fixed["yes"] = True
        app.retry(handle.id)
        assert handle.result(timeout=30) == ["ok", "fixed"]


def test_a_branch_the_new_code_no_longer_asks_for_fails_as_non_determinism(
    make_app: Any,
) -> None:
    clock = perdure.VirtualClock()
    before = make_app(clock=clock)

    @before.workflow("fan")
    async def fan(ctx: perdure.Context) -> list[Any]:
        later = perdure.Snooze(3600, reason="not now")
        return await ctx.gather(ctx.step("x", str, "x"), ctx.step("y", lambda: later))

    handle = before.start("fan")
    testing.drain(before)
    steps = {s.name: s.status for s in before.steps(handle.id)}
    assert steps == {"x": perdure.StepStatus.COMPLETED, "y": perdure.StepStatus.PENDING}

    # New code of the same version no longer gathers "y"; its snoozed task
    # comes due and is replayed by it.
    after = make_app(clock=clock)

    @after.workflow("fan")
    async def fan_without_y(ctx: perdure.Context) -> list[Any]:
        return [await ctx.step("x", str, "x")]

    clock.advance(hours=2)
    testing.drain(after)
    y = next(s for s in after.steps(handle.id) if s.name == "y")
    assert y.status == perdure.StepStatus.FAILED and y.error is not None
    assert y.error["type"] == "NonDeterminismError"
    assert "no longer asks for it" in y.error["message"]
