"""The typed observer is the engine's one channel of events: every moment is a hook."""

from __future__ import annotations

import inspect

import pytest

import perdure
from helpers import RecordingObserver
from perdure import testing
from perdure.engine.environment import ExecutionEnv
from perdure.engine.observer import Observer, Observers
from perdure.engine.worker import Worker


def test_there_is_no_string_event_channel() -> None:
    assert "on_event" not in inspect.signature(Worker).parameters
    assert not hasattr(Worker, "_emit")
    assert not hasattr(ExecutionEnv, "emit")
    assert "on_event" not in ExecutionEnv.__dataclass_fields__


def test_observers_dispatch_every_hook() -> None:
    hooks = {name for name in vars(Observer) if not name.startswith("_")}
    assert hooks <= set(vars(Observers)), hooks - set(vars(Observers))


def test_a_run_is_heard_through_typed_hooks(app: perdure.App) -> None:
    @app.workflow("child")
    def child(ctx: perdure.SyncContext, value: int) -> int:
        return value + 1

    @app.workflow("parent")
    async def parent(ctx: perdure.Context, value: int) -> int:
        got = await ctx.wait_for_signal("go")
        started = await ctx.start_child("child", value)
        return int(await started.result()) + int(got)

    handle = app.start("parent", 1)
    app.signal(handle.id, "go", 10)  # kept for the wait, which takes it
    recorder = RecordingObserver()
    counts = testing.drain(app, observers=[recorder])
    testing.drain(app, observers=[recorder])
    assert handle.result(timeout=20) == 12
    # The parent parked waiting for its child.
    assert handle.id in {task.run_id for task, _, _ in recorder.args("run_waiting")}
    assert [(t.run_id, name) for t, name in recorder.args("signal_consumed")] == [(handle.id, "go")]
    ((task, child_id),) = recorder.args("child_started")[:1]
    assert task.run_id == handle.id and app.get_run(child_id).workflow == "child"
    assert ("child", "completed") in {(r[1], r[2]) for r in recorder.args("run_finished")}
    assert recorder.count("step_checkpointed") >= 1
    # The worker's counts are the hooks it called, and runs ended by status.
    assert counts["run_waiting"] >= 1 and counts["execution_finished"] >= 1


def test_compensations_and_a_simulated_crash_are_heard(app: perdure.App) -> None:
    @app.workflow("saga", retry=perdure.RetryPolicy(max_attempts=1))
    def saga(ctx: perdure.SyncContext, value: None) -> None:
        ctx.step("book", lambda: "booked")
        ctx.on_rollback(lambda: None, name="unbook")
        ctx.step("pay", _refuse, retry=perdure.RetryPolicy(max_attempts=1))

    @app.workflow("once")
    def once(ctx: perdure.SyncContext, value: None) -> str:
        return str(ctx.step("effect", lambda: "done"))

    handle = app.start("saga")
    recorder = RecordingObserver()
    testing.drain(app, observers=[recorder])
    with pytest.raises(perdure.RunFailed):
        handle.result(timeout=20)
    assert recorder.args("run_compensating") == [(handle.id, 1)]

    crashed = app.start("once")
    with testing.crash_after("effect"):
        testing.drain(app, observers=[recorder])
    assert [task.run_id for (task,) in recorder.args("simulated_crash")] == [crashed.id]


def _refuse() -> None:
    raise perdure.PermanentError("declined")


def test_an_observer_of_the_deprecated_dead_lettered_hook_still_hears_the_reaper() -> None:
    heard: list[tuple[str, int]] = []

    class Old(Observer):
        def dead_lettered(self, count: int) -> None:
            heard.append(("old", count))

    class New(Observer):
        def reaped_for_good(self, count: int) -> None:
            heard.append(("new", count))

    Observers([Old(), New()]).reaped_for_good(3)
    assert heard == [("old", 3), ("new", 3)]
