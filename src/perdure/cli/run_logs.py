"""``perdure runs logs``: the log records each step attempt of a run emitted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from perdure.cli import render
from perdure.cli.options import json_option

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command("logs")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--step", default=None, help="Only the attempts of this step.")
@json_option("Print the attempts and their records as JSON.")
@click.pass_obj
def logs(state: CliState, ref: str, step: str | None, as_json: bool) -> None:
    """Show the logging records a run's step attempts emitted, attempt by attempt.

    Kept per attempt (a failed one's too), at most 200 records and 64 KiB
    each: an attempt that logged more says "truncated".
    """
    state.note_lag()
    with state.reader() as app:
        run = app.get_run(ref)
        found = app.step_logs(run.id, step=step)
    if as_json:
        render.echo_json({"run_id": run.id, "attempts": found})
        return
    out = render.console()
    if not found:
        which = f"step {step!r} of run {run.id}" if step else f"run {run.id}"
        out.print(Text(f"no log records for {which}", style="dim"))
        return
    for entry in found:
        out.print(_heading(entry))
        for record in entry["records"]:
            out.print(_line(record), soft_wrap=True)
        if entry["truncated"]:
            out.print(Text("  … truncated: later records were not kept", style="yellow"))


def _heading(entry: dict[str, Any]) -> Text:
    """``step charge · attempt 1 · retrying · worker w1``."""
    text = Text(f"step {entry['name']}", style="bold")
    text.append(f" · attempt {entry['attempt']} · {entry['status']}")
    if entry.get("worker_id"):
        text.append(f" · worker {entry['worker_id']}", style="dim")
    return text


def _line(record: dict[str, Any]) -> Text:
    """One record: time, level, logger, message."""
    at = str(record.get("at", ""))[11:23]
    level = str(record.get("level", ""))
    style = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "red bold"}.get(level, "")
    line = Text(f"  {at} ")
    line.append(f"{level:<7}", style=style)
    line.append(f" {record.get('logger', '')}: ", style="dim")
    line.append(str(record.get("message", "")))
    return line


def attach(group: click.Group) -> None:
    """Add ``logs`` to the ``runs`` group."""
    group.add_command(logs)
