"""``perdure workflows``: the workflow versions registered in the database."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.cli import render

if TYPE_CHECKING:
    from perdure.cli.main import CliState


@click.group()
def workflows() -> None:
    """Inspect registered workflows."""


@workflows.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_obj
def list_workflows(state: CliState, as_json: bool) -> None:
    """List registered workflow versions with their run counts by status.

    A workflow is registered when a worker serving it starts, or by
    ``perdure migrate --app APP``.
    """
    with state.app() as app:
        found = app.workflows()
    if as_json:
        render.echo_json(found)
        return
    out = render.console()
    if not found:
        out.print(
            "no workflow is registered; start a worker or run `perdure migrate --app APP`",
            style="dim",
        )
        return
    table = render.table()
    table.add_column("workflow", overflow="fold")
    table.add_column("version", justify="right", no_wrap=True)
    table.add_column("queue", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("registered", no_wrap=True)
    table.add_column("runs", overflow="fold")
    for info in found:
        table.add_row(
            render.text(info.name),
            render.text(info.version),
            render.text(info.queue),
            render.text(info.kind),
            render.text(render.format_time(info.updated_at, seconds=False)),
            render.counts_text(info.counts),
        )
    out.print(table)
