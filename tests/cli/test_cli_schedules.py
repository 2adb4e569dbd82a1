"""``perdure schedules``: list, pause, resume, trigger, remove against a real PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli
from perdure.cli.schedules import in_zone


@pytest.fixture
def perdure_cli(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run ``perdure --database-url ... --schema ... ARGS``."""

    def run(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--database-url", pg_url, "--schema", schema, *args])

    return run


def test_schedules_list_pause_resume_trigger_remove(
    app: perdure.App, perdure_cli: Callable[..., Result]
) -> None:
    @app.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> Any:
        return input

    app.schedule("0 9 * * 1-5", workflow="report", timezone="Europe/Paris", input={"team": "ops"})
    app.register()
    app.add_schedule("tidy", "*/5 * * * *", workflow="report", catchup="all", max_catchup=12)
    paris = app.get_schedule("report")

    table = perdure_cli("schedules", "list")
    assert table.exit_code == 0, table.output
    for text in ("report", "0 9 * * 1-5", "Europe/Paris", "09:00:00 +0", "latest", "all (max 12)"):
        assert text in table.output
    assert in_zone(paris.next_tick, "Europe/Paris") in table.output
    listed = json.loads(perdure_cli("schedules", "list", "--json").output)
    assert [s["name"] for s in listed] == ["report", "tidy"]
    assert listed[0]["next_tick"] == paris.next_tick.isoformat() and not listed[0]["paused"]

    paused = perdure_cli("schedules", "pause", "report")
    assert paused.exit_code == 0 and "schedule report paused" in paused.output
    assert app.get_schedule("report").paused
    assert "paused" in perdure_cli("schedules", "list").output
    resumed = perdure_cli("schedules", "resume", "report")
    assert resumed.exit_code == 0 and "resumed" in resumed.output
    assert not app.get_schedule("report").paused

    fired = perdure_cli("schedules", "trigger", "tidy")
    assert fired.exit_code == 0, fired.output
    run_id = fired.output.split()[-1]
    run = app.get_run(run_id)
    assert (run.schedule, run.input, run.workflow) == ("tidy", None, "report")

    assert perdure_cli("schedules", "remove", "tidy").exit_code == 0
    assert [s.name for s in app.schedules()] == ["report"]
    missing = perdure_cli("schedules", "pause", "tidy")
    assert missing.exit_code == 1 and "ScheduleNotFound" in missing.output


def test_schedules_list_says_when_there_is_none(perdure_cli: Callable[..., Result]) -> None:
    assert perdure_cli("migrate").exit_code == 0
    empty = perdure_cli("schedules", "list")
    assert empty.exit_code == 0 and "no schedule yet" in empty.output
