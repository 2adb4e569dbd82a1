"""Function workflows end to end on a real PostgreSQL: steps, memoization, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def test_async_and_sync_workflows_complete_and_record_every_step(app: perdure.App) -> None:
    calls: list[str] = []

    def reserve(order: dict[str, Any]) -> dict[str, Any]:
        calls.append("reserve")
        return {"hold": order["id"]}

    async def charge(amount: int) -> int:
        calls.append("charge")
        await asyncio.sleep(0)
        return amount * 100

    @app.workflow("checkout")
    async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
        hold = await ctx.step("reserve", reserve, order)
        cents = await ctx.step("charge", charge, order["amount"])
        return {"hold": hold, "cents": cents}

    @app.workflow("double")
    def double(ctx: perdure.SyncContext, x: int) -> int:
        y = ctx.step("inc", lambda: x + 1)
        return ctx.step("mul", lambda: y * 2)

    first = app.start("checkout", {"id": 7, "amount": 3})
    second = app.start(double, 20)
    with BackgroundWorker(app, **FAST):
        assert first.result(timeout=20) == {"hold": {"hold": 7}, "cents": 300}
        assert second.result(timeout=20) == 42
    assert calls == ["reserve", "charge"]
    steps = app.steps(first.id)
    assert [(s.position, s.name, s.status, s.attempts) for s in steps] == [
        (0, "reserve", "completed", 1),
        (1, "charge", "completed", 1),
    ]
    events = [e.event for e in app.history(first.id)]
    assert events == [
        "run_created",
        "run_claimed",
        "step_completed",
        "step_completed",
        "run_completed",
    ]
    assert first.status() == perdure.RunStatus.COMPLETED


def test_a_step_output_is_the_json_value_on_first_run_and_on_replay(app: perdure.App) -> None:
    seen: list[Any] = []
    calls: list[int] = []

    def pair() -> tuple[int, int]:
        calls.append(1)
        return (1, 2)

    @app.workflow("tuples")
    async def tuples(ctx: perdure.Context) -> Any:
        value = await ctx.step("pair", pair)
        seen.append(value)
        await ctx.wait_for_signal("go")
        return value

    handle = app.start("tuples")
    testing.drain(app)
    assert handle.status() == perdure.RunStatus.WAITING
    # The signal wakes the run: a second execution replays "pair" from history.
    app.signal(handle.id, "go")
    testing.drain(app)
    assert handle.result(timeout=20) == [1, 2]
    assert seen == [[1, 2], [1, 2]]
    assert calls == [1]


def test_transient_step_failure_is_retried_with_backoff_then_succeeds(app: perdure.App) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("upstream unavailable")
        return "ok"

    policy = perdure.RetryPolicy(max_attempts=5, initial_delay=0.2, multiplier=2, jitter=0)

    @app.workflow("flaky")
    async def wf(ctx: perdure.Context) -> str:
        return await ctx.step("call", flaky, retry=policy)

    handle = app.start("flaky")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "ok"
    (step,) = app.steps(handle.id)
    assert (step.status, step.attempts) == ("completed", 3)
    history = app.history(handle.id)
    scheduled = [e for e in history if e.event == "run_retry_scheduled"]
    assert len(scheduled) == 2
    # The retry timing lives in the task's available_at: each release records
    # when the task became due again, and the claims respect it.
    claims = [e.at for e in history if e.event == "run_claimed"]
    releases = [e for e in history if e.event == "run_retry_scheduled"]
    for release, next_claim, delay in zip(releases, claims[1:], (0.2, 0.4), strict=True):
        assert release.detail is not None
        assert release.detail["delay"] == pytest.approx(delay)
        assert (next_claim - release.at).total_seconds() >= delay - 0.01


def test_permanent_error_fails_at_once_without_retry(app: perdure.App) -> None:
    calls: list[int] = []

    def declined() -> None:
        calls.append(1)
        raise perdure.PermanentError("card declined")

    @app.workflow("pay")
    async def pay(ctx: perdure.Context) -> None:
        await ctx.step("charge", declined)

    handle = app.start("pay")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as failed:
            handle.result(timeout=20)
    assert calls == [1]
    assert failed.value.error["type"] == "perdure.errors.StepFailed"
    assert "card declined" in failed.value.error["message"]
    assert "Traceback" in failed.value.error["traceback"]
    (step,) = app.steps(handle.id)
    assert (step.status, step.attempts) == ("failed", 1)
    assert step.error is not None and step.error["type"] == "perdure.errors.PermanentError"


def test_exhausted_attempts_dead_letter_the_run_and_retry_revives_it(app: perdure.App) -> None:
    broken = {"on": True}
    calls: list[str] = []

    def first() -> str:
        calls.append("first")
        return "done"

    def fragile() -> str:
        calls.append("fragile")
        if broken["on"]:
            raise RuntimeError("still broken")
        return "fixed"

    policy = perdure.RetryPolicy(max_attempts=2, initial_delay=0.05, jitter=0)

    @app.workflow("fragile")
    async def wf(ctx: perdure.Context) -> list[str]:
        a = await ctx.step("first", first)
        b = await ctx.step("fragile", fragile, retry=policy)
        return [a, b]

    handle = app.start("fragile")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as failed:
            handle.result(timeout=20)
        assert "still broken" in failed.value.error["message"]
        assert calls == ["first", "fragile", "fragile"]
        run = handle.get()
        assert run.status == "failed" and run.error is not None
        broken["on"] = False
        revived = app.retry(handle.id)
        assert revived.result(timeout=20) == ["done", "fixed"]
    # The completed step was not executed again by the retry.
    assert calls == ["first", "fragile", "fragile", "fragile"]
    assert "run_retried" in [e.event for e in app.history(handle.id)]


def test_workflow_body_errors_use_the_workflow_retry_policy(app: perdure.App) -> None:
    runs: list[int] = []

    @app.workflow("body", retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0.05))
    async def body(ctx: perdure.Context) -> None:
        await ctx.step("once", lambda: "x")
        runs.append(1)
        raise ValueError("bad body")

    handle = app.start("body")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed, match="bad body"):
            handle.result(timeout=20)
    assert len(runs) == 2
    assert [s.attempts for s in app.steps(handle.id)] == [1]


def test_transaction_step_commits_its_writes_exactly_once(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, total int)")
    bodies: list[int] = []

    def record(conn: psycopg.Connection[Any], order_id: int) -> int:
        conn.execute(f"INSERT INTO {schema}.orders VALUES (%s, 10)", (order_id,))
        return order_id

    async def record_async(conn: psycopg.AsyncConnection[Any], order_id: int) -> int:
        await conn.execute(f"INSERT INTO {schema}.orders VALUES (%s, 20)", (order_id,))
        return order_id

    @app.workflow("orders")
    async def orders(ctx: perdure.Context, order_id: int) -> int:
        await ctx.transaction("record", record, order_id)
        await ctx.transaction("record_async", record_async, order_id + 1000)
        bodies.append(order_id)
        if len(bodies) == 1:
            # Fail the body after both transactions committed: the retry must
            # replay them from their checkpoints, not insert twice.
            raise RuntimeError("crash after the transactions")
        return order_id

    handle = app.start("orders", 5)
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == 5
    assert db.execute("SELECT id, total FROM orders ORDER BY id").fetchall() == [
        (5, 10),
        (1005, 20),
    ]
    assert [s.kind for s in app.steps(handle.id)] == ["transaction", "transaction"]


def test_failing_transaction_rolls_back_its_writes(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    db.execute("CREATE TABLE ledger (n int)")

    def write_then_fail(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"INSERT INTO {schema}.ledger VALUES (1)")
        raise perdure.PermanentError("refused")

    @app.workflow("txfail")
    async def txfail(ctx: perdure.Context) -> None:
        await ctx.transaction("write", write_then_fail)

    handle = app.start("txfail")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed):
            handle.result(timeout=20)
    assert db.execute("SELECT count(*) FROM ledger").fetchone() == (0,)


def test_step_returning_non_json_fails_with_a_typed_error_naming_the_step(
    app: perdure.App,
) -> None:
    @app.workflow("badout")
    async def badout(ctx: perdure.Context) -> None:
        await ctx.step("make", lambda: object())

    handle = app.start("badout")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as failed:
            handle.result(timeout=20)
    message = failed.value.error["message"]
    assert "SerializationError" in message and "'make'" in message
    (step,) = app.steps(handle.id)
    assert step.status == "failed" and step.attempts == 1


def test_workflow_result_that_is_not_json_fails_the_run(app: perdure.App) -> None:
    @app.workflow("badresult")
    async def badresult(ctx: perdure.Context) -> Any:
        return {1: "int key"}

    handle = app.start("badresult")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as failed:
            handle.result(timeout=20)
    assert failed.value.error["type"] == "perdure.errors.SerializationError"


def test_result_timeout_and_cancel(app: perdure.App) -> None:
    @app.workflow("idle")
    async def idle(ctx: perdure.Context) -> None:
        return None

    handle = app.start("idle")
    with pytest.raises(perdure.ResultTimeout):
        handle.result(timeout=0.05)
    cancelled = app.cancel(handle.id, reason="not needed")
    assert cancelled.status == "cancelled"
    assert app.cancel(handle.id).status == "cancelled"
    with pytest.raises(perdure.RunCancelled):
        handle.result(timeout=1)
    events = app.history(handle.id)
    assert events[-1].event == "run_cancelled"
    assert events[-1].detail == {"reason": "not needed"}


def test_async_api_starts_and_waits(app: perdure.App) -> None:
    @app.workflow("hello")
    async def hello(ctx: perdure.Context, name: str) -> str:
        return await ctx.step("greet", lambda: f"hello {name}")

    async def main() -> None:
        handle = await app.start_async("hello", "ada", key="hello:ada")
        again = await app.start_async("hello", "ada", key="hello:ada")
        assert again.id == handle.id and not again.created
        worker = await app.worker_async(**FAST)
        task = asyncio.create_task(worker.run())
        try:
            assert await handle.result_async(timeout=20) == "hello ada"
        finally:
            worker.request_stop()
            await task

    asyncio.run(main())


def test_cancelling_a_waiting_caller_leaves_the_app_usable(app: perdure.App) -> None:
    @app.workflow("never")
    async def never(ctx: perdure.Context) -> None:
        return None

    async def main() -> None:
        handle = await app.start_async("never")
        waiter = asyncio.create_task(handle.result_async())
        # Let the wait reach the database at least once before cancelling it.
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await handle.status_async() == perdure.RunStatus.QUEUED

    asyncio.run(main())


def test_sync_workflow_transaction_step_runs_on_a_sync_connection(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    db.execute("CREATE TABLE user_notes (what text)")

    def write(conn: psycopg.Connection[Any], what: str) -> str:
        assert isinstance(conn, psycopg.Connection)
        conn.execute(f"INSERT INTO {schema}.user_notes VALUES (%s)", (what,))
        return what

    @app.workflow("audited")
    def audited(ctx: perdure.SyncContext, what: str) -> str:
        return ctx.transaction("write", write, what)

    handle = app.start("audited", "hello")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "hello"
    assert db.execute("SELECT what FROM user_notes").fetchall() == [("hello",)]


def test_a_workflow_without_input_and_a_start_by_function(app: perdure.App) -> None:
    @app.workflow()
    async def tick(ctx: perdure.Context) -> int:
        return await ctx.step("one", lambda: 1)

    handle = app.start(tick)
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == 1
    assert handle.get().workflow == "tick"


def test_a_workflow_reads_its_attempt_version_and_worker(app: perdure.App) -> None:
    seen: list[tuple[int, int, str]] = []

    @app.workflow("introspect", version=3)
    async def introspect(ctx: perdure.Context) -> str:
        seen.append((ctx.attempt, ctx.version, ctx.worker_id))
        await ctx.wait_for_signal("go")
        seen.append((ctx.attempt, ctx.version, ctx.worker_id))
        return ctx.worker_id

    handle = app.start("introspect")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == perdure.RunStatus.WAITING, 20, what="the wait")
        worker_ids = {w.id for w in app.workers()}
        app.signal(handle.id, "go")
        served_by = handle.result(timeout=20)
    assert served_by in worker_ids
    # Claimed once, parked, claimed again on the signal: the second execution
    # replays the first's reads, then reads the new claim.
    attempts = [attempt for attempt, _, _ in seen]
    assert attempts[0] == 1 and attempts[-1] == 2, seen
    assert {version for _, version, _ in seen} == {3}
    assert {worker for _, _, worker in seen} == {served_by}
