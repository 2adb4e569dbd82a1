"""A lease lost at the worst moment: the step's effects are not written.

Another worker "takes over" the run's task (its attempt is bumped, as a claim
after a lapsed lease does) just as a step starts, through a worker observer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import perdure
from perdure.engine.observer import Observer, StepAttempt


class _TakeOver(Observer):
    """At the start of step ``name``, make the task another worker's."""

    def __init__(self, url: str, schema: str, name: str) -> None:
        self.url, self.schema, self.name = url, schema, name
        self.taken = 0

    def step_started(self, step: StepAttempt) -> Any:
        if step.name == self.name:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE {self.schema}.tasks SET attempt = attempt + 1 WHERE id = %s",
                    (step.task.fence.task_id,),
                )
            self.taken += 1
        return None


def _run_once(app: perdure.App, observer: Observer) -> None:
    async def main() -> None:
        worker = await app.worker_async(
            observers=[observer], exit_when_idle=True, poll_seconds=0.02
        )
        await worker.run()

    asyncio.run(main())


@pytest.mark.parametrize("form", ["async", "def"])
def test_a_transaction_step_whose_lease_is_gone_runs_none_of_its_sql(
    app: perdure.App, db: psycopg.Connection[Any], pg_url: str, schema: str, form: str
) -> None:
    db.execute("CREATE TABLE effects (n int)")

    async def write_async(conn: Any) -> int:
        await conn.execute("INSERT INTO effects VALUES (1)")
        return 1

    def write_sync(conn: Any) -> int:
        conn.execute("INSERT INTO effects VALUES (1)")
        return 1

    @app.workflow("tx")
    async def tx(ctx: perdure.Context) -> int:
        return await ctx.transaction("tx", write_async if form == "async" else write_sync)

    handle = app.start("tx")
    observer = _TakeOver(pg_url, schema, "tx")
    _run_once(app, observer)

    assert observer.taken == 1
    assert db.execute("SELECT count(*) FROM effects").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (0,)
    assert handle.status() == "running"  # the other worker's now, until its lease lapses


def test_a_plain_step_that_returns_an_awaitable_gives_its_result(app: perdure.App) -> None:
    """A ``def`` step (or a lambda) handing back a coroutine: the worker awaits it."""

    async def later() -> int:
        await asyncio.sleep(0)
        return 42

    @app.workflow("defers")
    async def defers(ctx: perdure.Context) -> int:
        return await ctx.step("hands_back", lambda: later())

    handle = app.start("defers")
    assert app.run_until_complete(handle) == 42
    [step] = app.steps(handle.id)
    assert step.output == 42 and step.status == "completed"


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_run_cancelled_during_its_last_step_ends_cancelled(
    app: perdure.App, db: psycopg.Connection[Any], ending: str
) -> None:
    """The cancel wins: the completion (or the failure) written after it changes nothing."""

    def cancel_own_run(run_id: str) -> str:
        app.cancel(run_id)
        if ending == "raises":
            raise perdure.PermanentError("failing after the cancel")
        return "done"

    @app.workflow("self_cancel", retry=perdure.RetryPolicy(max_attempts=1))
    async def self_cancel(ctx: perdure.Context) -> str:
        return await ctx.step("cancel", cancel_own_run, ctx.run_id)

    handle = app.start("self_cancel")
    with pytest.raises(perdure.RunCancelled):
        app.run_until_complete(handle)
    assert handle.status() == "cancelled"
    run = app.get_run(handle.id)
    assert run.output is None
    events = [e.event for e in app.history(handle.id)]
    assert "run_completed" not in events and "run_failed" not in events
