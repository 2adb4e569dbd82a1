"""``perdure schedules``: list schedules with their next tick; pause, resume, trigger, remove."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import click
from rich.table import Table

from perdure.cli import render, suggest
from perdure.cli.options import emit, json_option
from perdure.errors import ScheduleNotFound
from perdure.types import ScheduleInfo

if TYPE_CHECKING:
    from perdure.api.app import App
    from perdure.cli.state import CliState


@click.group()
def schedules() -> None:
    """See schedules and their next tick; pause, resume or trigger them."""


def in_zone(value: datetime | None, timezone: str) -> str:
    """A tick on the schedule's own wall clock, with its offset: ``2024-03-31 09:00:00 +02:00``."""
    if value is None:
        return render.NONE
    local = value.astimezone(ZoneInfo(timezone))
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"


@schedules.command("list")
@json_option("Print a JSON array instead of a table.")
@click.pass_obj
def list_schedules(state: CliState, as_json: bool) -> None:
    """List schedules: cron, time zone, workflow, next and last tick, paused, catchup.

    Ticks are shown on the schedule's own wall clock, with their UTC offset
    (JSON gives them in UTC).
    """
    with state.app() as app:
        found = app.schedules()
    render.listing(
        found,
        as_json,
        "no schedule yet: declare one with @app.schedule or app.add_schedule",
        _table,
    )


def _table(found: list[ScheduleInfo]) -> Table:
    table = render.table("schedule", "cron", "timezone", "workflow", "next tick", "last tick")
    table.add_column("paused")
    table.add_column("catchup")
    for info in found:
        catchup = info.catchup if info.catchup != "all" else f"all (max {info.max_catchup})"
        table.add_row(
            render.text(info.name),
            render.text(info.cron),
            render.text(info.timezone),
            render.text(info.workflow),
            render.text(in_zone(info.next_tick, info.timezone), "dim" if info.paused else ""),
            render.text(in_zone(info.last_tick, info.timezone)),
            render.text("paused", "yellow") if info.paused else render.text("no"),
            render.text(catchup),
        )
    return table


def _show(info: ScheduleInfo, verb: str, as_json: bool) -> None:
    emit(
        as_json,
        info,
        f"schedule {info.name} {verb}; next tick {in_zone(info.next_tick, info.timezone)} "
        f"({info.timezone}), catchup {info.catchup}",
    )


@contextmanager
def _named(app: App) -> Iterator[None]:
    """Turn ScheduleNotFound into one line with the nearest schedule names."""
    try:
        yield
    except ScheduleNotFound as exc:
        hint = suggest.hint(exc.name, [s.name for s in app.schedules()])
        raise click.ClickException(
            f"ScheduleNotFound: no schedule named {exc.name!r}{hint or ' (perdure schedules list)'}"
        ) from None


@schedules.command("pause")
@click.argument("name")
@json_option()
@click.pass_obj
def pause(state: CliState, name: str, as_json: bool) -> None:
    """Stop starting runs of schedule NAME until it is resumed (runs started go on)."""
    with state.app() as app, _named(app):
        _show(app.pause_schedule(name), "paused", as_json)


@schedules.command("resume")
@click.argument("name")
@json_option()
@click.pass_obj
def resume(state: CliState, name: str, as_json: bool) -> None:
    """Resume schedule NAME; ticks missed while paused follow its catchup policy.

    catchup latest starts the most recent missed tick, all starts every one
    (up to its max), skip starts none.
    """
    with state.app() as app, _named(app):
        _show(app.resume_schedule(name), "resumed", as_json)


@schedules.command("trigger")
@click.argument("name")
@json_option()
@click.pass_obj
def trigger(state: CliState, name: str, as_json: bool) -> None:
    """Start one run of schedule NAME now; its ticks are unchanged."""
    with state.app() as app, _named(app):
        handle = app.trigger_schedule(name)
    emit(as_json, {"schedule": name, "run": handle.id}, f"schedule {name}: started run {handle.id}")


@schedules.command("remove")
@click.argument("name")
@json_option()
@click.pass_obj
def remove(state: CliState, name: str, as_json: bool) -> None:
    """Delete schedule NAME (its runs stay).

    A schedule declared in code comes back when a worker with that code
    starts: remove the declaration too.
    """
    with state.app() as app, _named(app):
        app.remove_schedule(name)
    emit(as_json, {"schedule": name, "removed": True}, f"schedule {name} removed")
