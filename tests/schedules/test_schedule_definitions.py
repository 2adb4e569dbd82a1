"""Declaring, adding, changing and removing schedules; bad input writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import perdure
from perdure.errors import InvalidSchedule, ScheduleNotFound

# These tests also run on PostgreSQL 15 (see tests/conftest.py).
pytestmark = pytest.mark.all_servers

START = datetime(2024, 3, 29, 12, 0, tzinfo=UTC)


def _count(db: psycopg.Connection[Any]) -> int:
    found = db.execute("SELECT to_regclass('schedules') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = db.execute("SELECT count(*) FROM schedules").fetchone()
    return int(row[0]) if row else 0


def _define(app: perdure.App) -> None:
    @app.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> Any:
        return input


def test_a_decorated_workflow_is_scheduled_when_a_worker_registers(
    make_app: Callable[..., perdure.App],
) -> None:
    app = make_app(clock=perdure.VirtualClock(START))

    @app.schedule("0 9 * * *", timezone="Europe/Paris", input={"team": "ops"})
    @app.workflow("report")
    def report(ctx: perdure.SyncContext, input: Any) -> Any:
        return input

    # The other order works too: the workflow is looked up when registering.
    @app.workflow("cleanup")
    @app.schedule("*/5 * * * *", catchup="skip", name="cleanup-often")
    def cleanup(ctx: perdure.SyncContext, input: Any) -> None:
        return None

    app.schedule("@hourly", workflow="report", name="hourly-report")
    app.register()  # what a worker does when it starts

    found = {s.name: s for s in app.schedules()}
    assert sorted(found) == ["cleanup-often", "hourly-report", "report"]
    daily = found["report"]
    assert (daily.cron, daily.timezone, daily.workflow, daily.input) == (
        "0 9 * * *",
        "Europe/Paris",
        "report",
        {"team": "ops"},
    )
    assert (daily.catchup, daily.max_catchup, daily.source, daily.paused) == (
        "latest",
        100,
        "code",
        False,
    )
    # 09:00 in Paris on 30 March 2024 is 08:00 UTC.
    assert daily.next_tick == datetime(2024, 3, 30, 8, tzinfo=UTC)
    assert app.upcoming_ticks("report", 3)[1:] == [
        datetime(2024, 3, 31, 7, tzinfo=UTC),
        datetime(2024, 4, 1, 7, tzinfo=UTC),
    ]
    assert found["cleanup-often"].workflow == "cleanup"
    assert found["cleanup-often"].catchup == "skip"
    assert found["hourly-report"].next_tick == datetime(2024, 3, 29, 13, tzinfo=UTC)
    assert app.get_schedule("hourly-report") == found["hourly-report"]


def test_changed_code_updates_the_row_and_the_pause_state_survives_a_restart(
    make_app: Callable[..., perdure.App],
) -> None:
    clock = perdure.VirtualClock(START)
    first = make_app(clock=clock)
    _define(first)
    first.schedule("0 9 * * *", workflow="report", input={"v": 1})
    first.register()
    first.pause_schedule("report")
    before = first.get_schedule("report")

    # The same code again (a restart): nothing changes.
    clock.advance(hours=1)
    again = make_app(clock=clock)
    _define(again)
    again.schedule("0 9 * * *", workflow="report", input={"v": 1})
    again.register()
    assert again.get_schedule("report") == before

    # New input: the row follows, the next tick stays, the pause stays.
    changed = make_app(clock=clock)
    _define(changed)
    changed.schedule("0 9 * * *", workflow="report", input={"v": 2})
    changed.register()
    now = changed.get_schedule("report")
    assert (now.input, now.paused, now.next_tick) == ({"v": 2}, True, before.next_tick)
    assert now.updated_at > before.updated_at

    # A new cron: the next tick is recomputed from now.
    recron = make_app(clock=clock)
    _define(recron)
    recron.schedule("30 * * * *", workflow="report", input={"v": 2})
    recron.register()
    now = recron.get_schedule("report")
    assert now.next_tick == datetime(2024, 3, 29, 13, 30, tzinfo=UTC) and now.paused


def test_add_schedule_at_runtime_is_persisted_and_remove_deletes_it(
    make_app: Callable[..., perdure.App],
) -> None:
    owner = make_app(clock=perdure.VirtualClock(START))
    _define(owner)
    owner.register()
    # Another App, without the workflow's code, finds it in the registry table.
    operator = make_app(clock=perdure.VirtualClock(START))
    info = operator.add_schedule("nightly", "0 2 * * *", workflow="report", input=[1, 2])
    assert (info.source, info.input, info.next_tick) == (
        "api",
        [1, 2],
        datetime(2024, 3, 30, 2, tzinfo=UTC),
    )
    assert [s.name for s in owner.schedules()] == ["nightly"]
    again = operator.add_schedule("nightly", "0 2 * * *", workflow="report", input=[1, 2])
    assert again == info, "adding the same schedule twice changes nothing"
    operator.remove_schedule("nightly")
    assert operator.schedules() == []
    with pytest.raises(ScheduleNotFound, match="nightly"):
        operator.remove_schedule("nightly")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cron": "61 * * * *"}, InvalidSchedule, "invalid cron"),
        ({"cron": "* * *"}, InvalidSchedule, "3 field"),
        ({"timezone": "Europe/Pariss"}, InvalidSchedule, "unknown time zone"),
        ({"workflow": "nope"}, perdure.UnknownWorkflow, "nope"),
        ({"workflow": "bad name!"}, perdure.WorkflowDefinitionError, "workflow name"),
        ({"catchup": "some"}, InvalidSchedule, "latest, all, skip"),
        ({"max_catchup": 0}, InvalidSchedule, "max_catchup"),
        ({"input": {1, 2}}, perdure.SerializationError, "not a valid perdure payload"),
        ({"name": "bad name!"}, InvalidSchedule, "invalid name"),
        ({"name": None}, InvalidSchedule, "needs a name"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_written(
    app: perdure.App,
    db: psycopg.Connection[Any],
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    _define(app)
    app.register()
    arguments: dict[str, Any] = {"name": "s", "cron": "* * * * *", "workflow": "report"}
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        app.add_schedule(arguments.pop("name"), arguments.pop("cron"), **arguments)
    assert _count(db) == 0


def test_bad_declarations_raise_where_they_are_written(app: perdure.App) -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone"):
        app.schedule("0 9 * * *", workflow="report", timezone="Paris")
    with pytest.raises(InvalidSchedule, match="cron"):

        @app.schedule("every day")
        def nightly(ctx: perdure.SyncContext, input: Any) -> None: ...


def test_a_schedule_of_an_unknown_workflow_stops_the_registration_before_it_writes(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    _define(app)
    app.schedule("* * * * *", workflow="report", name="fine")
    app.schedule("* * * * *", workflow="missing")
    with pytest.raises(perdure.UnknownWorkflow, match="missing"):
        app.register()
    assert app.schedules() == []

    other = perdure.App(app.url, schema=app.schema)
    try:
        _define(other)
        other.schedule("* * * * *", workflow="report")
        other.schedule("0 * * * *", workflow="report")
        with pytest.raises(perdure.WorkflowDefinitionError, match="declared twice"):
            other.register()
    finally:
        other.close()


def test_operations_on_an_unknown_schedule_say_so(app: perdure.App) -> None:
    for operation in (
        app.pause_schedule,
        app.resume_schedule,
        app.trigger_schedule,
        app.get_schedule,
    ):
        with pytest.raises(ScheduleNotFound, match="ghost"):
            operation("ghost")
