"""The reaper's dead-letter threshold is the workflow's ``max_lapses``, the same on every worker."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from perdure import testing
from perdure.store.store import execute_sync


def lapse(app: perdure.App, db: psycopg.Connection[Any], times: int) -> None:
    """Claim every ready task as a worker that dies at once, ``times`` times, reaping each time."""
    for _ in range(times):
        claim = app.statements.tasks.claim(
            worker_id="ghost",
            queues=["fragile", "sturdy"],
            names=["fragile", "sturdy"],
            versions=[1, 1],
            limit=10,
            lease_seconds=60,
        )
        assert execute_sync(db, claim)
        db.execute("UPDATE tasks SET lease_expires_at = now() - interval '1 second'")
        execute_sync(db, app.statements.tasks.rescue(limit=100))


def test_each_workflow_dead_letters_at_its_own_max_lapses(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("fragile", max_lapses=2)
    def fragile(ctx: perdure.SyncContext) -> None:
        return None

    @app.workflow("sturdy")
    def sturdy(ctx: perdure.SyncContext) -> None:
        return None

    app.register()
    assert db.execute("SELECT name, max_lapses FROM workflows ORDER BY name").fetchall() == [
        ("fragile", 2),
        ("sturdy", 5),
    ]
    weak, strong = app.start("fragile"), app.start("sturdy")
    lapse(app, db, 2)
    # Dead-lettered at 2: handed on to compensate, with the error it will end with.
    handed = app.get_run(weak.id)
    assert handed.status == perdure.RunStatus.COMPENSATING
    assert handed.error is not None and handed.error["type"] == "LeaseExpired"
    assert "expired 2 times" in handed.error["message"]
    assert app.get_run(strong.id).status == perdure.RunStatus.QUEUED
    lapse(app, db, 3)
    # The compensating execution died twice more: the run fails without them.
    failed = app.get_run(weak.id)
    assert failed.status == perdure.RunStatus.FAILED
    assert failed.error is not None and failed.error["type"] == "LeaseExpired"
    assert "while it ran its compensations" in failed.error["message"]
    assert failed.error["failure"]["message"] == handed.error["message"]
    assert app.get_run(strong.id).status == perdure.RunStatus.COMPENSATING
    testing.drain(app)  # nothing to undo: the compensating execution ends it
    ended = app.get_run(strong.id)
    assert ended.status == perdure.RunStatus.FAILED
    assert ended.error is not None and ended.error["type"] == "LeaseExpired"
    assert "expired 5 times" in ended.error["message"]


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, True])
def test_a_bad_max_lapses_is_refused(app: perdure.App, bad: Any) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError, match="max_lapses"):

        @app.workflow("bad", max_lapses=bad)
        def wf(ctx: perdure.SyncContext) -> None:
            return None


def test_a_dead_lettered_graph_step_fails_its_run_after_the_compensations(
    make_app: Any,
) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    undone: list[str] = []
    g = app.graph("trip", max_lapses=1)

    @g.step(compensate=lambda ctx, out: undone.append(out))
    def flight(ctx: perdure.StepContext, _: Any) -> str:
        return "F1"

    @g.step(depends_on=[flight])
    def car(ctx: perdure.StepContext, _: Any) -> str:
        return "C1"

    handle = app.start("trip")
    with testing.crash_after("car", before=True):  # car's worker dies mid-step
        testing.drain(app, lease_seconds=30)
    clock.advance(seconds=31)
    testing.drain(app, lease_seconds=30)  # its lease lapsed once: max_lapses
    run = app.get_run(handle.id)
    assert run.status == perdure.RunStatus.COMPENSATED
    assert undone == ["F1"]
    car_step = next(s for s in app.steps(handle.id) if s.name == "car")
    assert car_step.status == "failed" and car_step.error is not None
    assert car_step.error["type"] == "LeaseExpired"


def test_a_dead_lettered_parallel_step_fails_its_run_after_the_compensations(
    make_app: Any,
) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    undone: list[str] = []

    @app.workflow("fanout", max_lapses=1, retry=perdure.RetryPolicy(max_attempts=1))
    async def fanout(ctx: perdure.Context) -> Any:
        booked = await ctx.step("book", lambda: "B1")
        ctx.on_rollback(undone.append, booked, name="unbook")
        return await ctx.gather(ctx.step("left", lambda: 1), ctx.step("right", lambda: 2))

    handle = app.start("fanout")
    with testing.crash_after("right", before=True):
        testing.drain(app, lease_seconds=30)
    clock.advance(seconds=31)
    testing.drain(app, lease_seconds=30)
    assert app.get_run(handle.id).status == perdure.RunStatus.COMPENSATED
    assert undone == ["B1"]
