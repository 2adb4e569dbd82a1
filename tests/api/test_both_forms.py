"""Every public call, in its sync and its async form, against the real database.

One table names each call of the App and of RunHandle with the arguments it
is given in a small world of runs (finished, failed, queued, paused) and what
its answer must be; each row runs once blocking and once awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import perdure
from perdure.testing import drain

from .test_surface import APP_PAIRS, HANDLE_PAIRS


@dataclass
class World:
    """Runs in each state, and a schedule, made before each call."""

    app: perdure.App
    done: perdure.RunHandle
    failed: perdure.RunHandle
    queued: perdure.RunHandle
    paused: perdure.RunHandle


def _build(app: perdure.App) -> World:
    @app.workflow("echo")
    def echo(ctx: perdure.SyncContext, value: Any) -> Any:
        ctx.step("a", lambda: value)
        ctx.set_event("e", value)
        ctx.write_stream("s", value)
        ctx.close_stream("s")
        return value

    @app.workflow("boom", retry=perdure.RetryPolicy(max_attempts=1))
    def boom(ctx: perdure.SyncContext, value: Any) -> Any:
        raise perdure.PermanentError("no")

    done = app.start("echo", 7)
    failed = app.start("boom", 1)
    drain(app)
    queued = app.start("echo", 8, delay=3600)
    paused = app.start("echo", 9, delay=3600)
    app.pause(paused.id)
    app.add_schedule("nightly", "0 0 * * *", workflow="echo")
    return World(app, done, failed, queued, paused)


Case = tuple[
    Callable[[World], tuple[tuple[Any, ...], dict[str, Any]]], Callable[[World, Any], bool]
]


def _args(*args: Any, **kwargs: Any) -> Callable[[World], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda w: (tuple(a(w) if callable(a) else a for a in args), kwargs)


def done_id(w: World) -> str:
    return w.done.id


def _answered(w: World) -> str:
    """A run of ``tally`` keyed ``tally:1`` that answered update ``u-1`` (``bump`` 1 -> 2):
    calling again with that id gets the same reply without a worker."""
    import threading

    @w.app.workflow("tally")
    async def tally(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("stop")

    @w.app.update_handler("tally")
    async def bump(ctx: perdure.Context, n: int) -> int:
        return n + 1

    run = w.app.start("tally", key="tally:1")
    replies: list[Any] = []
    sender = threading.Thread(
        target=lambda: replies.append(w.app.update(run.id, "bump", 1, update_id="u-1", timeout=30))
    )
    sender.start()
    while sender.is_alive():
        drain(w.app)
    sender.join()
    assert replies == [2]
    return run.id


def queued_id(w: World) -> str:
    return w.queued.id


APP_CASES: dict[str, Case] = {
    "add_schedule": (
        _args("hourly", "0 * * * *", workflow="echo"),
        lambda w, r: r.name == "hourly",
    ),
    "cancel": (_args(queued_id), lambda w, r: r.status == perdure.RunStatus.CANCELLED),
    "cancel_runs": (
        _args(perdure.RunFilter(workflow="echo")),
        lambda w, r: {x.id for x in r.runs} == {w.queued.id, w.paused.id},
    ),
    "count_runs": (_args(), lambda w, r: r["completed"] == 1 and r["failed"] == 1),
    "ensure_schema": (_args(), lambda w, r: r is None),
    "emit": (_args("paid", {"n": 1}, key="k"), lambda w, r: isinstance(r, int) and r > 0),
    "emitted_events": (_args(), lambda w, r: r == []),
    "emit_many": (
        _args([("paid", {"n": 3}, "k3"), perdure.EventToEmit("paid", {"n": 4}, "k3")]),
        lambda w, r: len(r) == 2 and r[0] == r[1] and r[0] > 0,
    ),
    "emit_many_recorded": (
        _args([("paid", {"n": 5}, "k5"), ("paid", {"n": 5}, "k5")]),
        lambda w, r: r[0][1] is True and r[1] == (r[0][0], False),
    ),
    "stranded": (_args(), lambda w, r: isinstance(r, list)),
    "move_runs": (
        _args("echo", 2, 1, dry_run=True),
        lambda w, r: r.moved == [] and r.skipped == [],
    ),
    "emit_recorded": (
        _args("paid", {"n": 2}, key="k2"),
        lambda w, r: isinstance(r[0], int) and r[0] > 0 and isinstance(r[1], bool),
    ),
    "record_audit": (
        _args(actor="t", via="cli", source="cli", action="probe", outcome="ok"),
        lambda w, r: isinstance(r, int) and r > 0,
    ),
    "audit_log": (
        _args(actor="t"),
        lambda w, r: isinstance(r, list) and all(e.actor == "t" for e in r),
    ),
    "events": (_args(done_id), lambda w, r: [(e["key"], e["value"]) for e in r] == [("e", 7)]),
    "fork": (
        lambda w: ((w.done.id,), {"from_step": "a"}),
        lambda w, r: r.id != w.done.id and r.get().forked_from == w.done.id,
    ),
    "get_event": (_args(done_id, "e"), lambda w, r: r == 7),
    "get_run": (_args(done_id), lambda w, r: r.id == w.done.id and r.status == "completed"),
    "get_schedule": (_args("nightly"), lambda w, r: r.workflow == "echo"),
    "handle": (_args(done_id), lambda w, r: r == w.done and not r.created),
    "held_tasks": (_args(), lambda w, r: r == []),
    "history": (_args(done_id), lambda w, r: r[-1].event == "run_completed"),
    "list_runs": (_args(workflow="boom"), lambda w, r: [x.id for x in r] == [w.failed.id]),
    "pause": (_args(queued_id), lambda w, r: r.status == perdure.RunStatus.PAUSED),
    "close": (
        _args(),
        lambda w, r: r is None and w.app._core.store is None and not w.app._core.portal.started,
    ),
    "pause_schedule": (_args("nightly"), lambda w, r: r.paused),
    "prune": (_args(timedelta(days=1), dry_run=True), lambda w, r: r.dry_run),
    "queues": (_args(), lambda w, r: {"echo", "boom"} <= {q.name for q in r}),
    "read_stream": (_args(done_id, "s"), lambda w, r: r == [7]),
    "register": (_args(), lambda w, r: r is None),
    "registered_workflows": (_args(), lambda w, r: {x.name for x in r} == {"echo", "boom"}),
    "remove_schedule": (_args("nightly"), lambda w, r: w.app.schedules() == []),
    "restart": (
        _args(done_id),
        lambda w, r: r.created and r.get().restarted_from == w.done.id,
    ),
    "resume": (lambda w: ((w.paused.id,), {}), lambda w, r: r.status != perdure.RunStatus.PAUSED),
    "resume_schedule": (_args("nightly"), lambda w, r: not r.paused),
    "retry": (lambda w: ((w.failed.id,), {}), lambda w, r: r.status() == perdure.RunStatus.QUEUED),
    "retry_runs": (
        _args(perdure.RunFilter(workflow="boom")),
        lambda w, r: [x.id for x in r.runs] == [w.failed.id],
    ),
    "run_activity": (
        lambda w: ((), {"since": datetime.now(UTC) - timedelta(hours=1), "bucket_seconds": 3600}),
        lambda w, r: sum(row["n"] for row in r) == 4,
    ),
    "run_until_complete": (_args(done_id), lambda w, r: r == 7),
    "run_worker": (
        _args(exit_when_idle=True, poll_seconds=0.02),
        lambda w, r: r.counts is not None,
    ),
    "schedules": (_args(), lambda w, r: [s.name for s in r] == ["nightly"]),
    "set_queue": (_args("echo", concurrency=3), lambda w, r: r.concurrency == 3),
    "signal": (_args(queued_id, "go", 1), lambda w, r: isinstance(r, int)),
    "signal_many": (
        lambda w: (([w.queued.id, w.paused.id, w.queued.id], "go", [1, 2, 3]), {}),
        lambda w, r: len(set(r)) == 3 and r[0] < r[2],
    ),
    "signals": (_args(done_id), lambda w, r: r == []),
    "update": (_args(_answered, "bump", 1, update_id="u-1", timeout=5), lambda w, r: r == 2),
    "update_with_start": (
        lambda w: (
            ("tally",),
            {"key": _answered(w) and "tally:1", "update": "bump", "payload": 1, "update_id": "u-1"},
        ),
        lambda w, r: r == 2,
    ),
    "updates": (_args(done_id), lambda w, r: r == []),
    "start": (_args("echo", 1, key="k"), lambda w, r: r.created and r.status() == "queued"),
    "start_many": (
        _args("echo", [1, 2], keys=["m1", "m2"]),
        lambda w, r: [h.status() for h in r] == ["queued", "queued"],
    ),
    "step_logs": (_args(done_id), lambda w, r: r == []),
    "steps": (_args(done_id), lambda w, r: r[0].name == "a"),
    "tick_schedules": (_args(), lambda w, r: r == []),
    "trigger_schedule": (_args("nightly"), lambda w, r: r.get().workflow == "echo"),
    "upcoming_ticks": (_args("nightly", 3), lambda w, r: len(r) == 3 and r[0] < r[1] < r[2]),
    "worker": (_args(concurrency=2), lambda w, r: isinstance(r, perdure.Worker)),
    "workers": (_args(), lambda w, r: isinstance(r, list)),
    "workflows": (_args(), lambda w, r: {x.name for x in r} == {"echo", "boom"}),
}

HANDLE_CASES: dict[str, Case] = {
    "get": (_args(), lambda w, r: r.id == w.done.id),
    "result": (_args(timeout=5), lambda w, r: r == 7),
    "status": (_args(), lambda w, r: r == perdure.RunStatus.COMPLETED),
}


def test_the_tables_cover_the_surface() -> None:
    assert set(APP_CASES) == {sync for sync, _ in APP_PAIRS}
    assert set(HANDLE_CASES) == {sync for sync, _ in HANDLE_PAIRS}


async def _collect(value: Any) -> Any:
    if hasattr(value, "__aiter__"):
        return [item async for item in value]
    return await value


def _call(target: Any, name: str, form: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if form == "sync":
        result = getattr(target, name)(*args, **kwargs)
        return list(result) if name == "read_stream" else result
    return asyncio.run(_collect(getattr(target, f"{name}_async")(*args, **kwargs)))


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(APP_CASES))
def test_an_app_call(app: perdure.App, name: str, form: str) -> None:
    world = _build(app)
    arguments, check = APP_CASES[name]
    args, kwargs = arguments(world)
    result = _call(app, name, form, args, kwargs)
    assert check(world, result), f"app.{name} ({form}) answered {result!r}"


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(HANDLE_CASES))
def test_a_handle_call(app: perdure.App, name: str, form: str) -> None:
    world = _build(app)
    arguments, check = HANDLE_CASES[name]
    args, kwargs = arguments(world)
    result = _call(world.done, name, form, args, kwargs)
    assert check(world, result), f"handle.{name} ({form}) answered {result!r}"
