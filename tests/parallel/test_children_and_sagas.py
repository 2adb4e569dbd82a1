"""Child workflows and saga compensation in function workflows."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}


def test_child_runs_once_and_the_parent_waits_durably_for_its_result(app: perdure.App) -> None:
    release = threading.Event()

    @app.workflow("resize_batch")
    async def resize_batch(ctx: perdure.Context, images: list[str]) -> list[str]:
        await ctx.step("wait", lambda: release.wait(20))
        return [f"{i}@2x" for i in images]

    @app.workflow("album")
    async def album(ctx: perdure.Context, images: list[str]) -> dict[str, Any]:
        child = await ctx.start_child("resize_batch", images)
        resized = await child.result()
        return {"child": child.run_id, "resized": resized}

    handle = app.start("album", ["a", "b"])
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: handle.status() == "waiting", 20, what="the parent to wait")
        parent = handle.get()
        assert parent.waiting_for is not None and "child" in parent.waiting_for
        child_id = parent.waiting_for["child"]
        # The parent holds no slot while it waits; the child's claim may land
        # a moment after the parent parked.
        wait_until(
            lambda: [h.task.run_id for h in worker.worker.running.values()] == [child_id],
            20,
            what="only the child to be held",
        )
        release.set()
        out = handle.result(timeout=30)
    assert out == {"child": child_id, "resized": ["a@2x", "b@2x"]}
    child = app.get_run(child_id)
    assert child.parent_run_id == handle.id
    assert child.key == f"{handle.id}:0"
    assert len(app.list_runs(workflow="resize_batch")) == 1
    assert [(s.name, s.kind) for s in app.steps(handle.id)] == [
        ("child:resize_batch", "child"),
        ("result:resize_batch", "child_result"),
    ]


def test_a_failed_child_raises_child_failed_in_the_parent(app: perdure.App) -> None:
    @app.workflow("doomed")
    async def doomed(ctx: perdure.Context) -> None:
        raise perdure.PermanentError("child broke")

    @app.workflow("guardian")
    def guardian(ctx: perdure.SyncContext) -> dict[str, str]:
        child = ctx.start_child(doomed)
        try:
            child.result()
        except perdure.ChildFailed as exc:
            return {"status": exc.status, "child": exc.child_run_id}
        return {"status": "completed", "child": child.run_id}

    handle = app.start("guardian")
    with BackgroundWorker(app, **FAST):
        out = handle.result(timeout=30)
    assert out["status"] == "failed"
    assert app.get_run(out["child"]).status == perdure.RunStatus.FAILED


def test_cancelling_a_parent_cancels_its_children_down_the_tree(app: perdure.App) -> None:
    @app.workflow("leaf")
    async def leaf(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("never")

    @app.workflow("middle")
    async def middle(ctx: perdure.Context) -> None:
        await (await ctx.start_child("leaf")).result()

    @app.workflow("root")
    async def root(ctx: perdure.Context) -> None:
        await (await ctx.start_child("middle")).result()

    handle = app.start("root")
    with BackgroundWorker(app, **FAST):
        wait_until(
            lambda: len(app.list_runs(workflow="leaf", status="waiting")) == 1,
            20,
            what="the grandchild to wait",
        )
        app.cancel(handle.id, "no longer needed")
    statuses = {r.workflow: (r.status.value, r.error) for r in app.list_runs()}
    assert statuses["root"][0] == "cancelled"
    assert statuses["middle"] == (
        "cancelled",
        {"type": "Cancelled", "message": "parent run cancelled"},
    )
    assert statuses["leaf"][0] == "cancelled"


def test_saga_compensations_run_newest_first_and_the_run_ends_compensated(
    app: perdure.App,
) -> None:
    log: list[str] = []

    def book(what: str) -> str:
        log.append(f"book {what}")
        return f"{what}-1"

    def cancel(ref: str) -> None:
        log.append(f"cancel {ref}")

    def charge() -> None:
        raise perdure.PermanentError("card declined")

    @app.workflow("trip")
    async def trip(ctx: perdure.Context) -> None:
        flight = await ctx.step("flight", book, "flight")
        ctx.on_rollback(cancel, flight)
        hotel = await ctx.step("hotel", book, "hotel")
        ctx.on_rollback(cancel, hotel, name="cancel_hotel")
        await ctx.step("charge", charge)

    handle = app.start("trip")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
    assert info.value.status == "compensated"
    assert log == ["book flight", "book hotel", "cancel hotel-1", "cancel flight-1"]
    run = handle.get()
    assert run.status == perdure.RunStatus.COMPENSATED
    assert run.error is not None and "card declined" in run.error["message"]
    assert [(s.name, s.kind, s.status.value) for s in app.steps(handle.id)][-2:] == [
        ("compensate:cancel_hotel", "compensation", "completed"),
        ("compensate:cancel", "compensation", "completed"),
    ]


def test_a_failing_rollback_ends_compensation_failed_but_the_others_still_run(
    app: perdure.App,
) -> None:
    log: list[str] = []

    def broken_undo() -> None:
        raise perdure.PermanentError("undo failed")

    @app.workflow("half")
    async def half(ctx: perdure.Context) -> None:
        await ctx.step("one", lambda: None)
        ctx.on_rollback(lambda: log.append("undo one"), name="undo_one")
        await ctx.step("two", lambda: None)
        ctx.on_rollback(broken_undo)
        raise perdure.PermanentError("then it broke")

    handle = app.start("half")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
    assert info.value.status == "compensation_failed"
    assert log == ["undo one"]
    assert handle.get().error["compensations_failed"] == ["broken_undo"]


def test_cancel_during_a_gather_drops_queued_steps_and_lets_running_ones_finish(
    app: perdure.App, db: Any, schema: str
) -> None:
    release = threading.Event()
    started = threading.Event()
    cancelled = threading.Event()
    #: (step index, whether the cancel had returned when it started)
    queued_ran: list[tuple[int, bool]] = []

    def slow() -> str:
        started.set()
        release.wait(20)
        return "slow"

    def queued(i: int) -> int:
        queued_ran.append((i, cancelled.is_set()))
        return i

    @app.workflow("cancel_fan")
    async def cancel_fan(ctx: perdure.Context) -> list[Any]:
        return await ctx.gather(
            ctx.step("slow", slow), *(ctx.step(f"q{i}", queued, i) for i in range(3))
        )

    handle = app.start("cancel_fan")
    # Concurrency 1: while the slow step holds the only slot, the steps not
    # claimed before it (the claim order among a gather's steps is not fixed)
    # stay queued.
    with BackgroundWorker(app, concurrency=1, poll_seconds=0.05, lease_seconds=5) as worker:
        assert started.wait(20)
        app.cancel(handle.id, "enough")
        cancelled.set()
        release.set()
        wait_until(lambda: not worker.worker.running, 20, what="the slow step to finish")
        # The queued steps are dropped by the claim loop once their head
        # start (for the worker that reached the gather) has passed.
        wait_until(
            lambda: db.execute(f"SELECT count(*) FROM {schema}.tasks").fetchone() == (0,),
            20,
            what="the queued steps to be dropped",
        )
    assert handle.status() == "cancelled"
    statuses = {s.name: s.status.value for s in app.steps(handle.id)}
    assert statuses["slow"] == "completed"
    # The steps still queued at the cancel were dropped: none ran after it,
    # none has a checkpoint; those that ran before it are recorded.
    assert [i for i, after in queued_ran if after] == []
    ran_before = {i for i, _ in queued_ran}
    for i in range(3):
        status = statuses.get(f"q{i}")
        assert (status == "completed") == (i in ran_before), statuses


def test_retry_of_a_function_saga_whose_rollback_failed_reruns_only_that_rollback(
    app: perdure.App,
) -> None:
    log: list[str] = []
    broken = {"on": True}

    def undo(what: str) -> None:
        if what == "b" and broken["on"]:
            raise perdure.PermanentError("undo b failed")
        log.append(f"undo {what}")

    def fail() -> None:
        log.append("fail")
        raise perdure.PermanentError("boom")

    @app.workflow("resaga")
    async def resaga(ctx: perdure.Context) -> None:
        for what in ("a", "b", "c"):
            await ctx.step(what, log.append, what)
            ctx.on_rollback(undo, what, name=f"undo_{what}")
        await ctx.step("fail", fail)

    handle = app.start("resaga")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
        assert info.value.status == "compensation_failed"
        assert log == ["a", "b", "c", "fail", "undo c", "undo a"]
        broken["on"] = False
        app.retry(handle.id)
        with pytest.raises(perdure.RunFailed) as again:
            handle.result(timeout=30)
    assert again.value.status == "compensated"
    assert log == ["a", "b", "c", "fail", "undo c", "undo a", "undo b"]


def test_a_child_by_name_comes_from_the_registry_or_fails_as_unknown(make_app: Any) -> None:
    registrar = make_app()

    @registrar.workflow("remote_child", queue="remote")
    async def remote_child(ctx: perdure.Context, n: int) -> int:
        return n + 1

    registrar.register()
    app = make_app()

    @app.workflow("asks_remote")
    async def asks_remote(ctx: perdure.Context) -> str:
        child = await ctx.start_child("remote_child", 1)
        return child.run_id

    @app.workflow("asks_ghost", retry=perdure.RetryPolicy(max_attempts=1))
    async def asks_ghost(ctx: perdure.Context) -> str:
        child = await ctx.start_child("ghost", 1)
        return child.run_id

    # This App has no code for remote_child: the registry names its queue.
    asked = app.start("asks_remote")
    testing.drain(app)
    child = app.get_run(asked.result(timeout=5))
    assert (child.workflow, child.queue, child.parent_run_id) == (
        "remote_child",
        "remote",
        asked.id,
    )

    ghost = app.start("asks_ghost")
    testing.drain(app)
    failed = ghost.get()
    assert failed.status == perdure.RunStatus.FAILED
    assert failed.error is not None and failed.error["type"].endswith("UnknownWorkflow")


def test_a_child_key_taken_by_another_workflow_fails_the_parent(app: perdure.App) -> None:
    @app.workflow("kid")
    async def kid(ctx: perdure.Context) -> str:
        return "kid"

    @app.workflow("other")
    async def other(ctx: perdure.Context) -> str:
        return "other"

    @app.workflow("keyed_parent", retry=perdure.RetryPolicy(max_attempts=1))
    async def keyed_parent(ctx: perdure.Context) -> str:
        child = await ctx.start_child("kid", key="shared-key")
        return str(await child.result())

    app.start("other", key="shared-key")
    parent = app.start("keyed_parent")
    testing.drain(app)
    failed = parent.get()
    assert failed.status == perdure.RunStatus.FAILED
    assert failed.error is not None and failed.error["type"].endswith("RunKeyConflict")
