"""The pytest plugin, used by a test module exactly as a user would write it."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = """
import perdure
from perdure import testing


def test_week_long_trial(perdure_app, perdure_clock):
    @perdure_app.workflow("trial")
    async def trial(ctx: perdure.Context, user: str) -> str:
        await ctx.sleep(7 * 86400)
        return await ctx.step("convert", lambda: "converted " + user)

    run = perdure_app.start("trial", "ada")
    testing.drain(perdure_app)
    assert run.status() == "waiting"
    perdure_clock.advance(days=7)
    assert perdure_app.run_until_complete(run) == "converted ada"
    testing.assert_step_ran(perdure_app, run, "convert")


def test_apps_are_isolated(perdure_app):
    assert perdure_app.list_runs() == []
"""


def test_the_plugin_fixtures_work_in_a_user_test_module(
    pytester: pytest.Pytester, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_TEST_DATABASE_URL", pg_url)
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert result.duration < 30
