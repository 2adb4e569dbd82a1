"""``perdure runs update``: send an update to a run and print its reply."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from perdure.cli.options import emit, json_option

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command("update")
@click.argument("ref", metavar="ID_OR_KEY")
@click.argument("name")
@click.argument("payload", required=False, default="null")
@click.option(
    "--id", "update_id", default=None, help="The update id: a retry with it is one update."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the reply.",
)
@json_option("Print {run, update, update_id, reply} as JSON.")
@click.pass_obj
def update(
    state: CliState,
    ref: str,
    name: str,
    payload: str,
    update_id: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Send update NAME with PAYLOAD (JSON, default null) to a run; print its reply.

    The run's worker validates it where the run waits: a refusal (UpdateRejected)
    records nothing in the run. Without --id a new id is made and printed with
    --json; with --id, sending again waits for the same reply.
    """
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise click.BadParameter(f"PAYLOAD is not valid JSON: {exc}", param_hint="PAYLOAD") from exc
    the_id = update_id
    if the_id is None:
        import uuid

        the_id = uuid.uuid4().hex
    with state.app() as app:
        run = app.get_run(ref)
        reply = app.update(run.id, name, value, update_id=the_id, timeout=timeout)
    emit(
        as_json,
        {"run": run.id, "update": name, "update_id": the_id, "reply": reply},
        json.dumps(reply),
    )


def attach(group: click.Group) -> None:
    """Add ``update`` to the ``runs`` group."""
    group.add_command(update)
