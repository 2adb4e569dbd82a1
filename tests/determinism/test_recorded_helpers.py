"""ctx.now, ctx.random, ctx.uuid4: recorded on first execution, the same on replay."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

import perdure
from perdure import testing


def test_helpers_are_recorded_and_replayed_after_a_wait(app: perdure.App) -> None:
    seen: list[tuple[datetime, float, uuid.UUID]] = []

    @app.workflow("helpers", version=1)
    async def helpers(ctx: perdure.Context) -> list[str]:
        when, number, ident = await ctx.now(), await ctx.random(), await ctx.uuid4()
        seen.append((when, number, ident))
        await ctx.wait_for_signal("go")  # the run parks: the next claim replays
        return [when.isoformat(), str(number), str(ident)]

    handle = app.start("helpers")
    testing.drain(app)
    app.signal(handle.id, "go", None)
    result = testing.run_until_complete(app, handle)
    assert len(seen) == 2  # executed once, replayed once
    assert seen[0] == seen[1]
    when, number, ident = seen[0]
    assert when.tzinfo is not None and abs((datetime.now(UTC) - when).total_seconds()) < 60
    assert 0.0 <= number < 1.0 and ident.version == 4
    assert result == [when.isoformat(), str(number), str(ident)]
    assert testing.step_names(app, handle)[:3] == ["ctx.now", "ctx.random", "ctx.uuid4"]


def test_sync_workflow_gets_the_same_helpers(app: perdure.App) -> None:
    seen: list[Any] = []

    @app.workflow("sync_helpers", version=1)
    def sync_helpers(ctx: perdure.SyncContext) -> str:
        ident = ctx.uuid4()
        seen.append((ctx.now(), ctx.random(), ident))
        ctx.wait_for_signal("go")
        return str(ident)

    handle = app.start("sync_helpers")
    testing.drain(app)
    app.signal(handle.id, "go", None)
    assert testing.run_until_complete(app, handle) == str(seen[0][2])
    assert seen[0] == seen[1]


def test_a_changed_call_on_replay_is_a_nondeterminism_error(make_app: Any) -> None:
    old = make_app()

    @old.workflow("changes", version=1)
    async def changes(ctx: perdure.Context) -> None:
        await ctx.now()
        await ctx.wait_for_signal("go")

    handle = old.start("changes")
    testing.drain(old)
    new = make_app()

    @new.workflow("changes", version=1)
    async def changed(ctx: perdure.Context) -> None:
        await ctx.uuid4()
        await ctx.wait_for_signal("go")

    new.signal(handle.id, "go", None)
    testing.drain(new)
    assert handle.status() == "failed"
    with pytest.raises(perdure.RunFailed) as failed:
        handle.result(timeout=5)
    assert failed.value.error["type"] == "perdure.errors.NonDeterminismError"
    message = failed.value.error["message"]
    assert "'ctx.now'" in message and "'ctx.uuid4'" in message


def test_check_replay_replays_the_helpers(app: perdure.App) -> None:
    @app.workflow("replayed", version=1)
    async def replayed(ctx: perdure.Context) -> None:
        await ctx.now()
        await ctx.random()
        await ctx.wait_for_signal("go")

    app.start("replayed")
    testing.drain(app)
    reports = testing.check_replay(app)
    assert reports and all(r.ok for r in reports)
