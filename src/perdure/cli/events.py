"""``perdure events``: emit an application event, list the latest with the runs they reached.

These are emitted events (``app.emit``), not the values a run publishes with
``ctx.set_event`` (``perdure runs show`` lists those).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from perdure.cli import render
from perdure.cli.options import emit, json_option
from perdure.cli.run_start import parse_input

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.group()
def events() -> None:
    """Emit application events and list the latest, with the runs each woke or started."""


@events.command("emit")
@click.argument("name")
@click.argument("payload", required=False)
@click.option("--key", help="Idempotency key: a second emit with it (per name) records nothing.")
@json_option("Print the event's id as JSON.")
@click.pass_obj
def emit_event(
    state: CliState, name: str, payload: str | None, key: str | None, as_json: bool
) -> None:
    """Emit event NAME with PAYLOAD (JSON; @FILE reads a file, @- stdin; default {}).

    It wakes the runs waiting on a match of it and starts the workflows it
    triggers, at once.
    """
    value = parse_input(payload)
    with state.app() as app:
        event_id = app.emit(name, value, key=key)
    emit(as_json, {"id": event_id}, f"event {name} emitted: id {event_id}")


@events.command("list")
@click.option("--name", help="Only events of this name.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@json_option("Print a JSON array instead of a table.")
@click.pass_obj
def list_events(state: CliState, name: str | None, limit: int, as_json: bool) -> None:
    """List the latest emitted events, newest first, with the runs each woke or started."""
    with state.app() as app:
        found = app.emitted_events(name, limit=limit)
    render.listing(
        found, as_json, "no event emitted yet: app.emit or `perdure events emit`", _table
    )


def _table(found: list[dict[str, Any]]) -> Table:
    table = render.table()
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("event", overflow="fold")
    table.add_column("key", overflow="fold")
    table.add_column("emitted", no_wrap=True)
    table.add_column("woke", justify="right", no_wrap=True)
    table.add_column("started", justify="right", no_wrap=True)
    table.add_column("payload", overflow="fold")
    for item in found:
        event = item["event"]
        table.add_row(
            render.text(event.id),
            render.text(event.name),
            render.text(event.key or render.NONE),
            render.text(render.format_time(event.emitted_at)),
            render.text(len(item["woke"])),
            render.text(len(item["started"])),
            render.text(render.compact(event.payload, 60)),
        )
    return table
