"""check-replay's other verdicts: new code that raises mid-history, code that returns
before a recorded step, and the line each verdict prints."""

from __future__ import annotations

from typing import Any

import perdure
from perdure import testing


def _two_steps_and_a_wait(app: perdure.App) -> perdure.RunHandle:
    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context) -> str:
        await ctx.step("create_account", lambda: "acct")
        await ctx.step("send_email", lambda: "sent")
        await ctx.wait_for_signal("verified")
        return "done"

    handle = app.start("onboard")
    testing.drain(app)
    assert handle.status() == "waiting"
    return handle


def test_new_code_that_raises_within_the_history_fails_the_replay(make_app: Any) -> None:
    handle = _two_steps_and_a_wait(make_app())
    app = make_app()

    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context) -> str:
        await ctx.step("create_account", lambda: "acct")
        raise ValueError("the new code breaks here")

    (report,) = testing.check_replay(app)
    assert (report.run_id, report.ok, report.position) == (handle.id, False, None)
    assert report.describe() == (
        f"run {handle.id}: replay failed: ValueError: the new code breaks here"
    )


def test_new_code_that_returns_before_a_recorded_step_diverges_there(make_app: Any) -> None:
    handle = _two_steps_and_a_wait(make_app())
    app = make_app()

    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context) -> str:
        await ctx.step("create_account", lambda: "acct")
        return "early"

    (report,) = testing.check_replay(app)
    assert (report.ok, report.position, report.recorded, report.requested) == (
        False,
        1,
        "send_email",
        None,
    )
    assert report.describe().startswith(f"run {handle.id}: diverges at position 1")
    same = make_app()

    @same.workflow("onboard", version=1)
    async def unchanged(ctx: perdure.Context) -> str:
        await ctx.step("create_account", lambda: "acct")
        await ctx.step("send_email", lambda: "sent")
        await ctx.wait_for_signal("verified")
        return "done"

    (report,) = testing.check_replay(same)
    assert report.describe() == f"run {handle.id}: ok (3 recorded step(s) replay)"
