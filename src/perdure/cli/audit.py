"""``perdure audit list``: who did what, through the dashboard, the HTTP API and the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click
from rich.table import Table

from perdure.cli import render, times
from perdure.cli.options import json_option
from perdure.types import AuditEntry

if TYPE_CHECKING:
    from perdure.cli.state import CliState

#: The outcomes' colours.
_STYLES = {"ok": "green", "refused": "yellow", "error": "red"}


@click.group()
def audit() -> None:
    """See who did what: the audit record of the dashboard, the API and the CLI."""


@audit.command("list")
@click.option("--actor", default=None, help="Only the entries of this token name or user.")
@click.option("--action", default=None, help="Only this action (cancel, signal, start, ...).")
@click.option("--run", "run", default=None, metavar="REF", help="Only the entries naming this run.")
@click.option(
    "--outcome",
    type=click.Choice(["ok", "refused", "error"]),
    default=None,
    help="Only this outcome.",
)
@click.option(
    "--since",
    default=None,
    metavar="DURATION|ISO",
    callback=times.point_option,
    help="Only entries this recent (30m, 2d) or since this ISO time.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="Entries shown, newest first.",
)
@json_option("Print a JSON array instead of a table.")
@click.pass_obj
def list_entries(
    state: CliState,
    actor: str | None,
    action: str | None,
    run: str | None,
    outcome: str | None,
    since: datetime | None,
    limit: int,
    as_json: bool,
) -> None:
    """List the audit record, newest first: when, who, from where, what, runs, outcome.

    Every state-changing action of the dashboard, the HTTP API and the CLI
    is there, refused ones included (a viewer's cancel, say).
    """
    with state.app() as app:
        found = app.audit_log(
            actor=actor, action=action, run=run, outcome=outcome, since=since, limit=limit
        )
    render.listing(found, as_json, "no entry in the audit record", _table)


def _who(entry: AuditEntry) -> str:
    return entry.actor if entry.role is None else f"{entry.actor} ({entry.role})"


def _runs(entry: AuditEntry) -> str:
    if not entry.runs:
        return render.NONE
    first = entry.runs[0][:8] if len(entry.runs[0]) == 36 else entry.runs[0]
    return first if len(entry.runs) == 1 else f"{first} +{len(entry.runs) - 1}"


def _table(found: list[AuditEntry]) -> Table:
    table = render.table()
    table.add_column("when", no_wrap=True)
    table.add_column("who")
    table.add_column("via", no_wrap=True)
    table.add_column("action", no_wrap=True)
    table.add_column("runs")
    table.add_column("outcome", no_wrap=True)
    table.add_column("from")
    for entry in found:
        table.add_row(
            render.format_time_short(entry.at),
            render.text(_who(entry)),
            render.text(entry.source),
            render.text(entry.action),
            render.text(_runs(entry)),
            render.text(entry.outcome, _STYLES.get(entry.outcome, "")),
            render.text(entry.address or render.NONE, "dim"),
        )
    return table
