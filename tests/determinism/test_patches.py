"""ctx.patched: new code for new runs, the old code path for histories recorded before."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

import perdure
from perdure import testing


def _old_code(app: perdure.App) -> None:
    @app.workflow("order", version=1)
    async def order(ctx: perdure.Context) -> list[str]:
        done = [await ctx.step("charge", str, "charged")]
        await ctx.wait_for_signal("shipped")
        done.append(await ctx.step("notify", str, "notified"))
        return done


def _patched_code(app: perdure.App, *, deprecated: bool = False) -> None:
    @app.workflow("order", version=1)
    async def order(ctx: perdure.Context) -> list[str]:
        done = [await ctx.step("charge", str, "charged")]
        if deprecated:
            await ctx.deprecate_patch("receipt")
            done.append(await ctx.step("receipt", str, "receipt"))
        elif await ctx.patched("receipt"):
            done.append(await ctx.step("receipt", str, "receipt"))
        if not deprecated:  # asked again: the same answer, no second marker
            assert await ctx.patched("receipt") is (len(done) == 2)
        await ctx.wait_for_signal("shipped")
        done.append(await ctx.step("notify", str, "notified"))
        return done


def test_new_runs_take_the_patch_and_old_histories_replay_the_old_branch(make_app: Any) -> None:
    old = make_app()
    _old_code(old)
    before = old.start("order")
    testing.drain(old)
    assert testing.step_names(old, before) == ["charge", "signal:shipped"]

    new = make_app()
    _patched_code(new)
    after = new.start("order")
    testing.drain(new)
    assert testing.step_names(new, after) == [
        "charge",
        "ctx.patched:receipt",
        "receipt",
        "signal:shipped",
    ]
    for handle in (before, after):
        new.signal(handle.id, "shipped", None)
    testing.drain(new)
    assert before.result(timeout=5) == ["charged", "notified"]  # the old code path
    assert after.result(timeout=5) == ["charged", "receipt", "notified"]  # replayed: new


def test_check_replay_says_when_a_patch_can_be_retired(make_app: Any) -> None:
    old = make_app()
    _old_code(old)
    before = old.start("order")
    testing.drain(old)
    new = make_app()
    _patched_code(new)
    after = new.start("order")
    testing.drain(new)

    reports = {r.run_id: r for r in testing.check_replay(new)}
    assert reports[before.id].ok and reports[before.id].patches == (("receipt", False),)
    assert reports[after.id].ok and reports[after.id].patches == (("receipt", True),)
    (status,) = testing.patch_statuses(list(reports.values()))
    assert status.runs_before == (before.id,) and status.runs_after == (after.id,)
    assert not status.retirable and "1 open run(s) recorded before it" in status.describe()

    new.signal(before.id, "shipped", None)
    testing.drain(new)
    assert before.status() == "completed"
    (status,) = testing.patch_statuses(testing.check_replay(new))
    assert status.retirable and status.runs_after == (after.id,)
    assert "ctx.deprecate_patch('receipt')" in status.describe()


def test_the_cli_reports_patches(make_app: Any, pg_url: str, schema: str, tmp_path: Any) -> None:
    from perdure.cli.main import cli

    old = make_app()
    _old_code(old)
    before = old.start("order")
    testing.drain(old)
    exported = tmp_path / "runs.json"
    exported.write_text(json.dumps(testing.export_runs(old)))
    new = make_app()
    _patched_code(new)
    app_module = tmp_path / "patched_app.py"
    app_module.write_text(
        "import perdure\n"
        "from tests.determinism.test_patches import _patched_code\n"
        "app = perdure.App()\n"
        "_patched_code(app)\n"
    )
    runner = CliRunner()
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        text = runner.invoke(cli, ["check-replay", "patched_app:app", "--from", str(exported)])
        as_json = runner.invoke(
            cli, ["check-replay", "patched_app:app", "--from", str(exported), "--json"]
        )
    finally:
        sys.path.remove(str(tmp_path))
    assert text.exit_code == 0, text.output
    assert "patch 'receipt': 1 open run(s) recorded before it" in text.output
    assert json.loads(as_json.output) == [
        {
            "run_id": before.id,
            "workflow": "order",
            "version": 1,
            "ok": True,
            "problem": None,
            "patches": {"receipt": False},
        }
    ]


def test_deprecate_patch_replays_runs_with_and_without_the_marker(make_app: Any) -> None:
    patched = make_app()
    _patched_code(patched)
    marked = patched.start("order")
    testing.drain(patched)
    retired = make_app()
    _patched_code(retired, deprecated=True)
    fresh = retired.start("order")
    testing.drain(retired)
    assert "ctx.patched:receipt" not in testing.step_names(retired, fresh)
    for handle in (marked, fresh):
        retired.signal(handle.id, "shipped", None)
    testing.drain(retired)
    assert marked.result(timeout=5) == ["charged", "receipt", "notified"]
    assert fresh.result(timeout=5) == ["charged", "receipt", "notified"]


def test_a_bad_patch_id_is_refused(app: perdure.App) -> None:
    @app.workflow("bad_patch", version=1)
    async def bad_patch(ctx: perdure.Context) -> list[str]:
        refused = []
        for patch_id in ("x" * 300, 7, "bad\nid"):
            try:
                await ctx.patched(patch_id)  # type: ignore[arg-type]
            except perdure.ConfigurationError as exc:
                refused.append(str(exc))
        return refused

    handle = app.start("bad_patch")
    assert len(testing.run_until_complete(app, handle)) == 3
    assert testing.step_names(app, handle) == []  # nothing recorded


def test_a_plain_def_workflow_uses_the_same_patches(make_app: Any) -> None:
    old = make_app()

    @old.workflow("sync_order", version=1)
    def order(ctx: perdure.SyncContext) -> str:
        ctx.wait_for_signal("go")
        return "old"

    before = old.start("sync_order")
    testing.drain(old)
    new = make_app()

    @new.workflow("sync_order", version=1)
    def patched_order(ctx: perdure.SyncContext) -> str:
        result = "new" if ctx.patched("fast-path") else "old"
        ctx.wait_for_signal("go")
        return result

    after = new.start("sync_order")
    testing.drain(new)
    for handle in (before, after):
        new.signal(handle.id, "go", None)
    testing.drain(new)
    assert (before.result(timeout=5), after.result(timeout=5)) == ("old", "new")
    assert testing.step_names(new, after)[0] == "ctx.patched:fast-path"
