"""``perdure events``: emit an application event, list the latest with the runs they reached.

These are emitted events (``app.emit``), not the values a run publishes with
``ctx.set_event`` (``perdure runs show`` lists those).
"""

from __future__ import annotations

import json
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


#: Events of a --file emitted per call (one transaction each): emit_many's limit.
FILE_CHUNK = 10_000


@events.command("emit")
@click.argument("name", required=False)
@click.argument("payload", required=False)
@click.option("--key", help="Idempotency key: a second emit with it (per name) records nothing.")
@click.option(
    "--file",
    "path",
    type=click.File("r", encoding="utf-8"),
    help="Emit the events of a JSON Lines file ('-': stdin), one object "
    '{"name", "payload", "key"} a line, instead of NAME.',
)
@json_option("Print the event's id (with --file: the counts and ids) as JSON.")
@click.pass_obj
def emit_event(
    state: CliState,
    name: str | None,
    payload: str | None,
    key: str | None,
    path: Any,
    as_json: bool,
) -> None:
    """Emit event NAME with PAYLOAD (JSON; @FILE reads a file, @- stdin; default {}).

    It wakes the runs waiting on a match of it and starts the workflows it
    triggers, at once. With --file, every event of the file is emitted with
    ``app.emit_many``, in calls of up to 10,000 events, each one transaction:
    all of a call or none.
    """
    if path is not None:
        if name is not None or payload is not None or key is not None:
            raise click.UsageError("give NAME, PAYLOAD and --key, or --file, not both")
        _emit_file(state, path, as_json)
        return
    if name is None:
        raise click.UsageError("give the event's NAME, or --file")
    value = parse_input(payload)
    with state.app() as app:
        event_id = app.emit(name, value, key=key)
    emit(as_json, {"id": event_id}, f"event {name} emitted: id {event_id}")


def _read_events(lines: Any, source: str) -> list[tuple[Any, Any, Any]]:
    """The events of JSON Lines ``lines`` as (name, payload, key); a bad line is refused
    naming its number, before anything is emitted."""
    found: list[tuple[Any, Any, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise click.BadParameter(
                f"line {number} is not JSON ({exc})", param_hint=source
            ) from None
        if not isinstance(item, dict) or not set(item) <= {"name", "payload", "key"}:
            raise click.BadParameter(
                f'line {number}: each line is an object with "name", "payload" and "key" only',
                param_hint=source,
            )
        found.append((item.get("name"), item.get("payload"), item.get("key")))
    return found


def _emit_file(state: CliState, lines: Any, as_json: bool) -> None:
    """Emit the events of ``lines`` in calls of FILE_CHUNK; print how many were recorded."""
    source = f"--file ({getattr(lines, 'name', '-')})"
    found = _read_events(lines, source)
    answers: list[tuple[int, bool]] = []
    with state.app() as app:
        for first in range(0, len(found), FILE_CHUNK):
            answers += app.emit_many_recorded(found[first : first + FILE_CHUNK])
    recorded = sum(1 for _, created in answers if created)
    counts = {
        "events": len(answers),
        "recorded": recorded,
        "already_emitted": len(answers) - recorded,
        "ids": [event_id for event_id, _ in answers],
    }
    emit(
        as_json,
        counts,
        f"{len(answers)} event(s) emitted: {recorded} recorded, "
        f"{len(answers) - recorded} already emitted (same name and key)",
    )


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
