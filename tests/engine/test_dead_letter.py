"""Dead letters: the reaper's threshold is the workflow's ``max_lapses``, the same on every
worker, and a run compensates however it fails, its own task dead-lettered included."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

import perdure
from helpers import wait_until
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
        execute_sync(db, app.statements.tasks.reap(limit=100))


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
    assert "lapsed 2 times" in handed.error["message"]
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
    assert "lapsed 5 times" in ended.error["message"]


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


@dataclass
class Order:
    """A run of ``order`` (reserve -> charge -> ship -> notify; reserve and charge undone
    if it fails) on a virtual clock, with what its steps and compensations did."""

    app: perdure.App
    clock: perdure.VirtualClock
    run_id: str = ""
    ran: Counter[str] = field(default_factory=Counter)
    undone: list[str] = field(default_factory=list)

    def drain_past_leases(self, rounds: int) -> None:
        """Drain, then let the leases of whatever died lapse; ``rounds`` times, then once more."""
        for _ in range(rounds):
            testing.drain(self.app, lease_seconds=30)
            self.clock.advance(seconds=31)
        testing.drain(self.app, lease_seconds=30)


def _order(make_app: Any, max_lapses: int) -> Order:
    clock = perdure.VirtualClock()
    order = Order(make_app(clock=clock), clock)

    def act(name: str) -> str:
        order.ran[name] += 1
        return name

    def undo(name: str) -> None:
        order.ran[f"undo:{name}"] += 1
        order.undone.append(name)

    @order.app.workflow("order", max_lapses=max_lapses)
    async def workflow(ctx: perdure.Context) -> None:
        reserved = await ctx.step("reserve", act, "reserve")
        ctx.on_rollback(undo, reserved, name="release")
        charged = await ctx.step("charge", act, "charge")
        ctx.on_rollback(undo, charged, name="refund")
        await ctx.step("ship", act, "ship", retry=perdure.RetryPolicy(max_attempts=5))
        await ctx.step("notify", act, "notify")

    order.run_id = order.app.start("order").id
    return order


def _events(app: perdure.App, run_id: str) -> list[str]:
    return [e.event for e in app.history(run_id)]


def test_a_step_that_kills_its_worker_every_time_is_dead_lettered_and_the_run_compensates(
    make_app: Any,
) -> None:
    order = _order(make_app, max_lapses=3)
    # ship runs, and its worker dies before its checkpoint, every time.
    with testing.crash_after("ship", before=True, times=100):
        order.drain_past_leases(4)

    run = order.app.get_run(order.run_id)
    assert run.status == perdure.RunStatus.COMPENSATED
    assert run.error is not None and run.error["type"] == "LeaseExpired"
    assert "lapsed 3 times" in run.error["message"]
    assert order.ran == {"reserve": 1, "charge": 1, "ship": 3, "undo:charge": 1, "undo:reserve": 1}
    assert order.undone == ["charge", "reserve"], "compensations run newest first"
    steps = [(s.name, s.status) for s in order.app.steps(order.run_id)]
    assert steps == [
        ("reserve", "completed"),
        ("charge", "completed"),
        ("compensate:refund", "completed"),
        ("compensate:release", "completed"),
    ]
    events = _events(order.app, order.run_id)
    assert events.count("run_claimed") == 4, "three executions died, one compensated"
    assert events.count("lease_expired") == 2
    handed = [e for e in order.app.history(order.run_id) if e.event == "run_compensating"]
    assert len(handed) == 1 and handed[0].detail is not None
    assert handed[0].detail["type"] == "LeaseExpired" and handed[0].detail["lapses"] == 3
    assert events[-1] == "run_compensated"
    assert events.index("run_compensating") < events.index("run_compensated")


def test_the_compensating_execution_never_runs_the_step_again(make_app: Any) -> None:
    order = _order(make_app, max_lapses=2)
    # ship fails once (its retry is recorded, due later), then kills its worker.
    with testing.fail_step("ship", times=1), testing.crash_after("ship", before=True, times=100):
        testing.drain(order.app, lease_seconds=30)
        ship = next(s for s in order.app.steps(order.run_id) if s.name == "ship")
        assert ship.status == "retrying"
        order.clock.advance(seconds=60)  # the retry is due
        order.drain_past_leases(2)

    assert order.app.get_run(order.run_id).status == perdure.RunStatus.COMPENSATED
    # Two executions ran ship and died (max_lapses); the third only compensated.
    assert order.ran["ship"] == 2 and order.ran["notify"] == 0
    assert order.undone == ["charge", "reserve"]
    ship = next(s for s in order.app.steps(order.run_id) if s.name == "ship")
    assert ship.status == "retrying", "its recorded attempt is left as it was"
    history = order.app.history(order.run_id)
    last_claim = [e.id for e in history if e.event == "run_claimed"][-1]
    after = [(e.event, e.step_name) for e in history if e.id > last_claim]
    assert after == [
        ("step_completed", "compensate:refund"),
        ("step_completed", "compensate:release"),
        ("run_compensated", None),
    ], "the compensating execution did more than compensate"


def test_a_compensating_execution_that_dies_max_lapses_times_fails_the_run_and_says_so(
    make_app: Any,
) -> None:
    order = _order(make_app, max_lapses=2)
    with (
        testing.crash_after("ship", before=True, times=100),
        testing.crash_after("compensate:refund", before=True, times=100),
    ):
        order.drain_past_leases(6)

    run = order.app.get_run(order.run_id)
    assert run.status == perdure.RunStatus.FAILED
    assert run.error is not None and run.error["type"] == "LeaseExpired"
    assert "lapsed 2 times while it ran its compensations" in run.error["message"]
    assert "did not run" in run.error["message"]
    assert run.error["failure"]["type"] == "LeaseExpired"
    assert "lapsed 2 times" in run.error["failure"]["message"]
    # Each phase died max_lapses times, and then it stopped: no loop.
    assert order.ran == {"reserve": 1, "charge": 1, "ship": 2, "undo:charge": 2}
    assert order.undone == ["charge", "charge"]
    last = order.app.history(order.run_id)[-1]
    assert last.event == "run_failed" and last.detail is not None
    assert last.detail["compensating"] is True and last.detail["lapses"] == 2
    order.clock.advance(seconds=31)
    testing.drain(order.app, lease_seconds=30)
    assert order.ran["undo:charge"] == 2, "a failed run's compensations do not start again"
    assert order.app.get_run(order.run_id).status == perdure.RunStatus.FAILED


@pytest.mark.timeout(240)  # about 20 s: three workers started one after another
def test_a_step_that_sigkills_its_worker_dead_letters_and_compensates_across_processes(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (id serial PRIMARY KEY, run_id uuid, step text, pid int)")
    args = ["--concurrency", "1", "--lease-seconds", "2", "--poll-seconds", "0.2"]
    workers = [spawn_worker("apps.dead_letter_app:app", *args)]
    wait_until(lambda: any(w.name == "doomed" for w in app.workflows()), 30, what="registration")
    handle = app.start("doomed")

    def finished() -> bool:
        if app.get_run(handle.id).status.is_final:
            return True
        if workers[-1].proc.poll() is not None:  # killed by ship: start the next one
            assert len(workers) < 6, "workers kept dying after the run was dead-lettered"
            workers.append(spawn_worker("apps.dead_letter_app:app", *args))
        return False

    wait_until(finished, 180, interval=0.2, what="the run to be dead-lettered and compensated")
    run = app.get_run(handle.id)
    assert run.status == perdure.RunStatus.COMPENSATED, run.error
    assert run.error is not None and run.error["type"] == "LeaseExpired"
    ledger = db.execute(
        "SELECT step, pid FROM ledger WHERE run_id = %s ORDER BY id", (handle.id,)
    ).fetchall()
    steps = [step for step, _ in ledger]
    # ship killed max_lapses (2) workers; the third worker only compensated, newest first.
    assert steps == ["reserve", "charge", "ship", "ship", "refund", "release"], steps
    ship_pids = [pid for step, pid in ledger if step == "ship"]
    assert ship_pids == [w.pid for w in workers[:2]], "each ship ran in a worker of its own"
    assert all(w.proc.returncode == -9 for w in workers[:2])
    assert workers[2].proc.poll() is None, "the compensating worker lives"
    events = _events(app, handle.id)
    assert events.count("lease_expired") == 1
    assert events.count("run_compensating") == 1
    assert events[-1] == "run_compensated"


def test_a_compensating_run_replayed_after_a_crash_runs_no_new_step(make_app: Any) -> None:
    clock = perdure.VirtualClock()
    app = make_app(clock=clock)
    fails = [True]
    ran: Counter[str] = Counter()

    def act(name: str) -> str:
        ran[name] += 1
        return name

    @app.workflow("flaky")
    async def flaky(ctx: perdure.Context) -> None:
        await ctx.step("book", act, "book")
        ctx.on_rollback(act, "unbook", name="unbook")
        if fails[0]:
            raise perdure.PermanentError("no room")
        await ctx.step("extra", act, "extra")

    handle = app.start("flaky")
    with testing.crash_after("compensate:unbook", before=True):
        testing.drain(app, lease_seconds=30)
    assert app.get_run(handle.id).status == perdure.RunStatus.COMPENSATING
    fails[0] = False  # replayed, the body no longer fails where it did
    clock.advance(seconds=31)
    testing.drain(app, lease_seconds=30)

    run = app.get_run(handle.id)
    assert run.status == perdure.RunStatus.COMPENSATED
    assert run.error is not None and run.error["type"].endswith("PermanentError")
    assert ran == {"book": 1, "unbook": 2}, "a compensating run ran a new step"
    assert [s.name for s in app.steps(handle.id)] == ["book", "compensate:unbook"]
