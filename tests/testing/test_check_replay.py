"""check-replay: inserted, removed and renamed steps are caught; appends pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import perdure
from perdure import testing
from perdure.cli.main import cli


def _waiting_run(app: perdure.App) -> perdure.RunHandle:
    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context, user: str) -> str:
        await ctx.step("create_account", lambda: "acct")
        await ctx.step("send_email", lambda: "sent")
        await ctx.wait_for_signal("verified")
        return "done"

    handle = app.start("onboard", "ada")
    testing.drain(app)
    assert handle.status() == "waiting"
    return handle


def _new_code(make_app: Any, steps: list[str], *, then_wait: bool = True) -> perdure.App:
    app = make_app()

    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context, user: str) -> str:
        for name in steps:
            await ctx.step(name, str, name)
        if then_wait:
            await ctx.wait_for_signal("verified")
        return "done"

    return app


@pytest.mark.parametrize(
    ("steps", "ok", "position", "recorded", "requested"),
    [
        (["create_account", "send_email"], True, None, None, None),
        (["create_account", "check_fraud", "send_email"], False, 1, "send_email", "check_fraud"),
        (["create_account"], False, 1, "send_email", "signal:verified"),
        (["create_account", "send_welcome"], False, 1, "send_email", "send_welcome"),
    ],
    ids=["unchanged", "inserted", "removed", "renamed"],
)
def test_check_replay_reports_the_first_diverging_position(
    make_app: Any,
    steps: list[str],
    ok: bool,
    position: int | None,
    recorded: str | None,
    requested: str | None,
) -> None:
    handle = _waiting_run(make_app())
    (report,) = testing.check_replay(_new_code(make_app, steps))
    assert report.run_id == handle.id and report.ok is ok
    assert (report.position, report.recorded, report.requested) == (position, recorded, requested)


def test_appending_steps_after_the_history_is_safe(make_app: Any) -> None:
    handle = _waiting_run(make_app())
    app = make_app()

    @app.workflow("onboard", version=1)
    async def onboard(ctx: perdure.Context, user: str) -> str:
        await ctx.step("create_account", lambda: "acct")
        await ctx.step("send_email", lambda: "sent")
        await ctx.wait_for_signal("verified")
        await ctx.step("celebrate", lambda: "new step")
        return "done"

    (report,) = testing.assert_replays(app)
    assert report.ok and report.run_id == handle.id and report.replayed == 3


def test_the_cli_exits_1_on_divergence_and_reads_an_export(
    make_app: Any, pg_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _waiting_run(make_app())
    runner = CliRunner()
    base = ["--database-url", pg_url, "--schema", schema]
    exported = tmp_path / "runs.json"
    result = runner.invoke(cli, [*base, "runs", "export", "-o", str(exported)])
    assert result.exit_code == 0, result.output
    assert json.loads(exported.read_text())[0]["steps"][0]["name"] == "create_account"
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "deploy_ok.py").write_text(
        "import perdure\napp = perdure.App()\n"
        "@app.workflow('onboard', version=1)\n"
        "async def onboard(ctx, user):\n"
        "    await ctx.step('create_account', lambda: 1)\n"
        "    await ctx.step('send_email', lambda: 1)\n"
        "    await ctx.wait_for_signal('verified')\n"
    )
    (tmp_path / "deploy_bad.py").write_text(
        "import perdure\napp = perdure.App()\n"
        "@app.workflow('onboard', version=1)\n"
        "async def onboard(ctx, user):\n"
        "    await ctx.step('send_email', lambda: 1)\n"
    )
    good = runner.invoke(cli, [*base, "check-replay", "deploy_ok:app"])
    assert good.exit_code == 0, good.output
    assert "all 1 run(s) replay" in good.output
    bad = runner.invoke(cli, [*base, "check-replay", "deploy_bad:app", "--from", str(exported)])
    assert bad.exit_code == 1
    assert "diverges at position 0" in bad.output or "position 0" in bad.output
