"""Races and joins of waits on a real PostgreSQL: ctx.wait_first and ctx.wait_all.

Each kind of member wins once (signal, event, timer, child, update); a losing
signal stays for a later wait; wait_all returns every value; bad arguments
are typed errors with nothing written; a recorded race replays (check-replay).
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain
from perdure.testing.replay import check_replay, export_runs

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def _approval(app: perdure.App) -> None:
    @app.workflow("approval")
    async def approval(ctx: perdure.Context, order: int) -> dict[str, Any]:
        first = await ctx.wait_first(
            approve=ctx.signal("approve"),
            reject=ctx.event("order.rejected", match={"order": order}),
            escalate=ctx.timer(hours=24),
        )
        value = first.value.payload if first.name == "reject" else first.value
        return {"winner": first.name, "value": value}


def _race_step(app: perdure.App, run_id: str) -> perdure.Step:
    (race,) = [s for s in app.steps(run_id) if s.kind == "race"]
    return race


def test_a_signal_wins_and_the_losers_are_left_alone(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _approval(app)
    handle = app.start("approval", 9)
    drain(app)
    run = handle.get()
    assert run.status == "waiting"
    # What the run waits for: every member, its match and its deadline.
    assert [m["name"] for m in run.waiting_for["race"]] == ["approve", "reject", "escalate"]
    assert run.waiting_for["race"][1] == {
        "name": "reject",
        "event": "order.rejected",
        "match": {"order": 9},
    }
    assert run.waiting_for["signals"] == ["approve"] and run.waiting_for["until"]
    app.signal(handle.id, "approve", {"by": "ann"})
    drain(app)
    assert handle.result(timeout=5) == {"winner": "approve", "value": {"by": "ann"}}
    race = _race_step(app, handle.id)
    assert (race.name, race.status) == ("race:approve|reject|escalate", "completed")
    # The event member was unfiled: a later emit of a match wakes nothing.
    assert db.execute("SELECT count(*) FROM race_event_waits").fetchone()[0] == 0
    assert app.emit("order.rejected", {"order": 9}) and app.emitted_events()[0]["woke"] == []


def test_an_event_wins_through_its_emitter(app: perdure.App) -> None:
    _approval(app)
    handle = app.start("approval", 9)
    other = app.start("approval", 10)
    drain(app)
    event_id = app.emit("order.rejected", {"order": 9, "why": "stock"})
    # The emitter completed the race of run 9 in its own transaction, not run 10's.
    race = _race_step(app, handle.id)
    assert race.status == "completed"
    assert race.output["winner"] == "reject" and race.output["value"]["id"] == event_id
    assert _race_step(app, other.id).status == "waiting"
    drain(app)
    assert handle.result(timeout=5) == {
        "winner": "reject",
        "value": {"order": 9, "why": "stock"},
    }
    assert app.emitted_events()[0]["woke"] == [handle.id]


def test_an_event_emitted_before_the_race_counts_with_lookback(app: perdure.App) -> None:
    @app.workflow("late_race")
    async def late_race(ctx: perdure.Context) -> str:
        first = await ctx.wait_first(
            go=ctx.signal("go"), shipped=ctx.event("shipped", {"id": 7}, lookback=3600)
        )
        return first.name

    app.emit("shipped", {"id": 7})
    handle = app.start("late_race")
    drain(app)
    assert handle.result(timeout=5) == "shipped"


def test_the_timer_wins_when_nothing_else_came(app: perdure.App) -> None:
    @app.workflow("short_approval")
    async def short_approval(ctx: perdure.Context) -> list[Any]:
        first = await ctx.wait_first(approve=ctx.signal("approve"), escalate=ctx.timer(seconds=0.3))
        # The timer's race is over: a signal sent now is for the next wait.
        later = await ctx.wait_for_signal("approve", timeout=60)
        return [first.name, first.value, later]

    handle = app.start("short_approval")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", what="the race")
        wait_until(
            lambda: any(s.kind == "race" and s.status == "completed" for s in app.steps(handle.id)),
            what="the timer",
        )
        app.signal(handle.id, "approve", "late")
        assert handle.result(timeout=20) == ["escalate", None, "late"]


def test_a_child_wins_and_a_losing_child_can_still_be_awaited(app: perdure.App) -> None:
    @app.workflow("quick")
    async def quick(ctx: perdure.Context, n: int) -> int:
        return n * 2

    @app.workflow("slow")
    async def slow(ctx: perdure.Context) -> str:
        return await ctx.wait_for_signal("finish")

    @app.workflow("parent")
    async def parent(ctx: perdure.Context) -> list[Any]:
        fast = await ctx.start_child("quick", 21)
        lagging = await ctx.start_child("slow")
        first = await ctx.wait_first(slow=lagging, fast=fast, stop=ctx.signal("stop"))
        return [first.name, first.value, lagging.run_id, await lagging.result()]

    handle = app.start("parent")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", what="the parent")
        wait_until(
            lambda: any(s.kind == "child_result" for s in app.steps(handle.id)),
            what="the race, won",
        )
        slow_run = next(s for s in app.steps(handle.id) if s.name == "child:slow").output["run_id"]
        # The loser runs on, to its own wait.
        wait_until(lambda: app.get_run(slow_run).status == "waiting", what="the slow child")
        app.signal(slow_run, "finish", "done")
        result = handle.result(timeout=20)
    assert result == ["fast", 42, slow_run, "done"]


def test_an_update_wins_and_the_handler_ran(app: perdure.App) -> None:
    @app.workflow("review")
    async def review(ctx: perdure.Context) -> list[Any]:
        ctx.state["notes"] = []
        first = await ctx.wait_first(
            approve=ctx.update("approve"), cancel=ctx.signal("cancel"), late=ctx.timer(hours=1)
        )
        return [first.name, first.value, ctx.state["notes"]]

    @app.update_handler("review")
    async def approve(ctx: perdure.Context, by: str) -> str:
        ctx.state["notes"].append(by)
        return f"approved by {by}"

    handle = app.start("review")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", what="the race")
        assert app.update(handle.id, "approve", "ann", timeout=20) == "approved by ann"
        assert handle.result(timeout=20) == ["approve", "ann", ["ann"]]


def test_a_losing_signal_stays_for_a_later_wait(app: perdure.App) -> None:
    @app.workflow("both")
    async def both(ctx: perdure.Context) -> list[Any]:
        first = await ctx.wait_first(a=ctx.signal("a"), b=ctx.signal("b"))
        second = await ctx.wait_for_signal("b", timeout=60)
        return [first.name, first.value, second]

    handle = app.start("both")
    app.signal(handle.id, "a", 1)
    app.signal(handle.id, "b", 2)
    drain(app)
    # Both were there: the first written member won; b was not consumed by the race.
    assert handle.result(timeout=5) == ["a", 1, 2]
    signals = {s["name"]: s for s in app.signals(handle.id)}
    race = _race_step(app, handle.id)
    assert signals["a"]["consumed_position"] == race.position
    assert signals["b"]["consumed_position"] == race.position + 1


def test_wait_all_returns_every_value(app: perdure.App) -> None:
    @app.workflow("gather_all")
    def gather_all(ctx: perdure.SyncContext) -> dict[str, Any]:
        got = ctx.wait_all(
            paid=ctx.event("paid", {"order": 1}),
            packed=ctx.signal("packed"),
            cooled=ctx.timer(0.2),
        )
        return {"paid": got["paid"].payload, "packed": got["packed"], "keys": list(got)}

    handle = app.start("gather_all")
    with BackgroundWorker(app, **FAST):
        wait_until(lambda: handle.status() == "waiting", what="the join")
        app.signal(handle.id, "packed", "box 3")
        app.emit("paid", {"order": 1, "amount": 5})
        assert handle.result(timeout=20) == {
            "paid": {"order": 1, "amount": 5},
            "packed": "box 3",
            "keys": ["paid", "packed", "cooled"],
        }
    rounds = [s for s in app.steps(handle.id) if s.kind == "race"]
    assert len(rounds) == 3 and all(s.status == "completed" for s in rounds)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ("none", "at least one member"),
        ("bad member name", "invalid member name"),
        ("negative timer", "timer"),
        ("not a wait", "not a wait"),
        ("bad signal name", "invalid signal name"),
        ("no update handler", "no handler"),
    ],
)
def test_bad_arguments_are_typed_errors_with_nothing_written(
    app: perdure.App, members: str, message: str
) -> None:
    @app.workflow("bad_race")
    async def bad_race(ctx: perdure.Context, case: str) -> str:
        builders = {
            "none": lambda: {},
            "bad member name": lambda: {"a b": ctx.signal("x")},
            "negative timer": lambda: {"t": ctx.timer(seconds=-1)},
            "not a wait": lambda: {"x": 5},
            "bad signal name": lambda: {"x": ctx.signal("no spaces here")},
            "no update handler": lambda: {"x": ctx.update("nothing")},
        }
        try:
            await ctx.wait_first(**builders[case]())
        except perdure.PerdureError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "accepted"

    handle = app.start("bad_race", members)
    drain(app)
    result = handle.result(timeout=5)
    assert message in result and result.split(":")[0] in (
        "ConfigurationError",
        "WorkflowDefinitionError",
    )
    assert app.steps(handle.id) == []  # nothing written


def test_check_replay_replays_a_race(app: perdure.App) -> None:
    _approval(app)

    @app.workflow("join")
    async def join(ctx: perdure.Context) -> dict[str, Any]:
        return await ctx.wait_all(a=ctx.signal("a"), b=ctx.signal("b"))

    done = app.start("approval", 9)
    halfway = app.start("join")
    drain(app)
    app.signal(done.id, "approve", "yes")
    app.signal(halfway.id, "b", 2)
    drain(app)
    assert done.result(timeout=5)["winner"] == "approve"
    assert halfway.status() == "waiting"  # one round won, parked at the second
    runs = export_runs(app, statuses=("completed", "waiting"))
    reports = {r.run_id: r for r in check_replay(app, runs)}
    assert reports[done.id].ok and reports[halfway.id].ok, reports
    assert reports[done.id].replayed == 1 and reports[halfway.id].replayed >= 1


def test_the_dashboard_and_the_cli_show_what_a_racing_run_waits_for(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    _approval(app)
    handle = app.start("approval", 9, key="approval-9")
    drain(app)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        page = client.get(f"/runs/{handle.id}").text
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page)))
    assert (
        'first of approve: signal approve, reject: event order.rejected matching {"order": 9}, '
        "escalate: a timer · the timer fires in " in text
    ), text
    shown = CliRunner().invoke(
        cli, ["--database-url", pg_url, "--schema", schema, "runs", "show", "approval-9"]
    )
    assert shown.exit_code == 0, shown.output
    flat = re.sub(r"\s+", "", shown.output)
    assert '"event":"order.rejected"' in flat and '"match":{"order":9}' in flat
    assert '"timer":86400' in flat and '"until":' in flat and '"signals":["approve"]' in flat


def test_the_docs_escalation_after_24_hours(pg_url: str, schema: str) -> None:
    """docs/races.md's expense workflow and its escalation test, on a virtual clock."""
    clock = perdure.VirtualClock()
    perdure_app = perdure.App(pg_url, schema=schema, clock=clock)
    perdure_clock = clock
    notified: list[int] = []

    def notify_manager(claim: dict[str, Any]) -> None:
        notified.append(claim["id"])

    @perdure_app.workflow("expense")
    async def expense(ctx: perdure.Context, claim: dict[str, Any]) -> str:
        first = await ctx.wait_first(
            approve=ctx.signal("approve"),
            reject=ctx.event("expense.rejected", match={"claim": claim["id"]}, lookback=3600),
            escalate=ctx.timer(hours=24),
        )
        if first.name == "approve":
            return f"approved by {first.value['by']}"
        if first.name == "reject":
            return f"rejected: {first.value.payload['reason']}"
        await ctx.step("notify_manager", notify_manager, claim)
        return "escalated"

    try:
        # The test as docs/races.md shows it.
        run = perdure_app.start("expense", {"id": 9, "amount": 50})
        drain(perdure_app)  # the run waits at the race
        assert run.status() == "waiting"
        perdure_clock.advance(hours=23)
        drain(perdure_app)
        assert run.status() == "waiting"  # not a day yet
        perdure_clock.advance(hours=1)
        assert perdure_app.run_until_complete(run) == "escalated"
        assert notified == [9]
    finally:
        perdure_app.close()


def test_two_events_for_one_race_deliver_one_and_leave_the_other(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    @app.workflow("either")
    async def either(ctx: perdure.Context) -> list[Any]:
        first = await ctx.wait_first(
            a=ctx.event("thing.a", {"n": 1}), b=ctx.event("thing.b", {"n": 1})
        )
        later = await ctx.wait_for_event("thing.b", {"n": 1}, lookback=3600, timeout=60)
        return [first.name, first.value.name, later.payload]

    handle = app.start("either")
    drain(app)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        assert "first of a: event thing.a" in client.get(f"/runs/{handle.id}").text
    app.emit("thing.a", {"n": 1})
    app.emit("thing.b", {"n": 1, "x": 2})  # the race is won: this event stays free
    (woke_b, woke_a) = [e["woke"] for e in app.emitted_events()]
    assert woke_a == [handle.id] and woke_b == []
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        # The race is won and the run due: the page says so before a worker claims it.
        assert "a worker claims the run" in client.get(f"/runs/{handle.id}").text
    drain(app)
    assert handle.result(timeout=5) == ["a", "thing.a", {"n": 1, "x": 2}]


def test_a_failed_child_raises_child_failed_from_the_race(app: perdure.App) -> None:
    @app.workflow("breaks", retry=perdure.RetryPolicy(max_attempts=1))
    async def breaks(ctx: perdure.Context) -> None:
        raise perdure.PermanentError("no stock")

    @app.workflow("watcher")
    async def watcher(ctx: perdure.Context) -> str:
        child = await ctx.start_child("breaks")
        try:
            await ctx.wait_first(done=child, late=ctx.timer(hours=1))
        except perdure.ChildFailed as exc:
            return f"{exc.status}: {exc.child_run_id == child.run_id}"
        return "no failure"

    handle = app.start("watcher")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=20) == "failed: True"
    race = _race_step(app, handle.id)
    assert race.status == "failed" and race.error is not None
    assert race.error["member"] == "done" and race.error["status"] == "failed"
    # The replay raises the same failure from the record.
    reports = check_replay(app, export_runs(app, statuses=("completed",)))
    assert all(r.ok for r in reports), reports


def test_racing_runs_woken_while_they_park_are_never_lost(app: perdure.App) -> None:
    """Signals and events sent while the worker parks the races: each run completes
    with what was sent to it (the run's row lock and the event name's lock)."""

    @app.workflow("racer")
    async def racer(ctx: perdure.Context, n: int) -> str:
        first = await ctx.wait_first(
            go=ctx.signal("go"),
            paid=ctx.event("racer.paid", {"n": n}, lookback=3600),
            late=ctx.timer(hours=1),
        )
        return first.name

    handles = [app.start("racer", n) for n in range(30)]
    with BackgroundWorker(app, **FAST):
        for n, handle in enumerate(handles):
            if n % 2:
                app.signal(handle.id, "go")
            else:
                app.emit("racer.paid", {"n": n})
        results = [h.result(timeout=60) for h in handles]
    assert results == ["paid" if n % 2 == 0 else "go" for n in range(30)]


def test_perdure_check_replay_replays_a_race_and_reports_a_reordered_one(
    app: perdure.App, tmp_path: Path
) -> None:
    _approval(app)
    waiting = app.start("approval", 9)
    done = app.start("approval", 10)
    drain(app)
    app.signal(done.id, "approve", "yes")
    drain(app)
    exported = tmp_path / "runs.json"
    exported.write_text(
        json.dumps(export_runs(app, statuses=("completed", "waiting")), default=str)
    )
    (tmp_path / "race_same.py").write_text(
        "import perdure\n"
        "from tests.waiting.test_races import _approval\n"
        "app = perdure.App()\n"
        "_approval(app)\n"
    )
    (tmp_path / "race_reordered.py").write_text(
        "import perdure\n"
        "app = perdure.App()\n"
        "@app.workflow('approval')\n"
        "async def approval(ctx, order):\n"
        "    first = await ctx.wait_first(\n"
        "        escalate=ctx.timer(hours=24), approve=ctx.signal('approve'),\n"
        "        reject=ctx.event('order.rejected', match={'order': order}))\n"
        "    return {'winner': first.name, 'value': first.value}\n"
    )
    runner = CliRunner()
    sys.path.insert(0, str(tmp_path))
    try:
        same = runner.invoke(cli, ["check-replay", "race_same:app", "--from", str(exported)])
        moved = runner.invoke(
            cli, ["check-replay", "race_reordered:app", "--from", str(exported), "--json"]
        )
    finally:
        sys.path.remove(str(tmp_path))
    assert same.exit_code == 0, same.output
    assert waiting.id in same.output and done.id in same.output
    assert moved.exit_code == 1, moved.output
    reports = {r["run_id"]: r for r in json.loads(moved.output)}
    assert not reports[done.id]["ok"] and "race:approve|reject|escalate" in str(reports[done.id])
