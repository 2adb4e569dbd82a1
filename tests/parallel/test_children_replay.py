"""A parent replays its children's recorded outcomes instead of asking again.

The parent's body fails once after both of its children ended, so its retry
replays the history: the completed child's output and the failed child's
ChildFailed come from the parent's own checkpoints, and no child starts twice.
"""

from __future__ import annotations

import perdure
from helpers import BackgroundWorker

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def test_recorded_child_outcomes_are_read_back_on_replay(app: perdure.App) -> None:
    @app.workflow("fine_child")
    async def fine_child(ctx: perdure.Context) -> int:
        return 5

    @app.workflow("broken_child")
    async def broken_child(ctx: perdure.Context) -> None:
        raise perdure.PermanentError("broken")

    outcomes: list[tuple[int, str]] = []

    @app.workflow("parent", retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0.05))
    async def parent(ctx: perdure.Context) -> list[object]:
        good = await (await ctx.start_child("fine_child")).result()
        try:
            await (await ctx.start_child("broken_child")).result()
            bad = "completed"
        except perdure.ChildFailed as exc:
            bad = exc.status
        outcomes.append((good, bad))
        if len(outcomes) == 1:
            raise RuntimeError("the body fails once; its retry replays the children")
        return [good, bad]

    handle = app.start("parent")
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == [5, "failed"]
    assert outcomes == [(5, "failed"), (5, "failed")]
    children = [run for run in app.list_runs() if run.parent_run_id == handle.id]
    assert sorted(run.workflow for run in children) == ["broken_child", "fine_child"]
