"""``perdure runs``: list, show, signal, pause and resume runs (see also cli.manage)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from perdure.cli import render, times
from perdure.cli.run_filters import filter_options
from perdure.cli.run_queueing import queueing_rows, unserved_versions, waits_for
from perdure.types import HistoryEvent, Run, RunStatus, Step

if TYPE_CHECKING:
    from perdure.cli.state import CliState

#: Kept for callers of the earlier name: see ``perdure.cli.times.parse_point``.
parse_since = times.parse_point


@click.group()
def runs() -> None:
    """Inspect runs and act on them (by id or by key)."""


@runs.command("list")
@filter_options
@click.option("--archived", is_flag=True, help="List archived runs (perdure prune --archive).")
@click.option("--cursor", help="Start after this cursor (printed under the previous page).")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="At most N runs."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_obj
def list_runs(
    state: CliState,
    /,
    cursor: str | None,
    limit: int,
    as_json: bool,
    **filters: Any,
) -> None:
    """List runs, newest first, a page at a time.

    A queued run of a version no live worker has is marked: it waits for a
    worker with that version (``perdure workflows list`` shows who serves what).
    """
    with state.reader() as app:
        found = app.list_runs(**filters, cursor=cursor, limit=limit)
        unserved = unserved_versions(app, found)
    state.note_lag()
    render.listing(found, as_json, "no runs match", lambda runs: runs_table(runs, unserved))
    if found.next_cursor is not None:
        # On stderr, so that --json output stays one JSON array.
        render.err_console().print(
            f"next page: --cursor {found.next_cursor}", style="dim", soft_wrap=True
        )


def runs_table(found: list[Run], unserved: set[tuple[str, int]] | None = None) -> Table:
    """The runs as a table; each run's key is on the line under its id.

    A queued run whose version no live worker has says so under its status.
    """
    table = render.table()
    table.add_column("run (key)", no_wrap=True)
    table.add_column("workflow", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("worker", overflow="ellipsis")
    now = datetime.now(UTC)
    for run in found:
        ident = render.text(run.id)
        if run.key is not None:
            ident.append("\n")
            key = run.key if len(run.key) <= len(run.id) else run.key[: len(run.id) - 1] + "…"
            ident.append(key, style="dim")
        status = render.status_text(run.status)
        if waits_for(run, unserved or set()):
            status.append(f"\nno worker has v{run.version}", style="dim")
        table.add_row(
            ident,
            render.text(f"{run.workflow}@{run.version}"),
            status,
            render.text(render.format_time_short(run.created_at, now)),
            render.text(render.format_duration(run_duration(run, now))),
            render.text(run.steps_completed),
            render.text(run.worker_id),
        )
    return table


def run_duration(run: Run, now: datetime | None = None) -> float | None:
    """How long the run has taken: start to finish, or start to now while it is live."""
    if run.status.is_final:
        return render.elapsed(run.started_at, run.completed_at or run.updated_at)
    return render.elapsed(run.started_at, None, now)


@runs.command("show")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--history", "with_history", is_flag=True, help="Also show the run's history.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_obj
def show(state: CliState, ref: str, with_history: bool, as_json: bool) -> None:
    """Show one run: its record, its steps and, with --history, what happened to it."""
    state.note_lag()
    with state.reader() as app:
        run = app.get_run(ref)
        steps = app.steps(run.id)
        children = app.list_runs(parent=run.id, archived=run.archived, limit=1000)
        events = app.history(run.id) if with_history else None
        unserved = unserved_versions(app, [run, *children])
    if as_json:
        document: dict[str, Any] = {"run": run, "steps": steps, "children": children}
        if events is not None:
            document["history"] = events
        render.echo_json(document)
        return
    out = render.console()
    out.print(run_header(run, unserved))
    if run.error:
        out.print()
        out.print(error_block(run.error))
    out.print()
    out.print(steps_table(steps) if steps else Text("no steps recorded", style="dim"))
    if children:
        out.print()
        out.print(Text(f"child runs ({len(children)})", style="bold"))
        out.print(runs_table(children, unserved))
    if events is not None:
        out.print()
        out.print(history_table(events) if events else Text("no history", style="dim"))
        for block in history_tracebacks(events):
            out.print()
            out.print(block)


def run_header(run: Run, unserved: set[tuple[str, int]] | None = None) -> Table:
    """The run's record as ``label  value`` lines."""
    rows: list[tuple[str, Text | str]] = [
        ("id", render.text(run.id)),
        ("workflow", render.text(f"{run.workflow} (version {run.version})")),
        ("queue", render.text(run.queue)),
        ("key", render.text(run.key)),
        ("status", render.status_text(run.status)),
    ]
    worker = waits_for(run, unserved or set())
    if worker:
        rows.append(("waiting for", render.text(f"{worker} (no live worker has it)")))
    rows += queueing_rows(run)
    if run.archived:
        rows.append(("archived", render.text("yes: moved to the archive by perdure prune")))
    if run.waiting_for:
        rows.append(("waiting for", render.text(render.dumps(run.waiting_for))))
    if run.parent_run_id:
        rows.append(("parent", render.text(run.parent_run_id)))
    if run.restarted_from:
        rows.append(("restarted from", render.text(run.restarted_from)))
    if run.forked_from:
        rows.append(("forked from", render.text(f"{run.forked_from} at {run.fork_step!r}")))
    rows += [
        ("created", render.text(render.format_time(run.created_at))),
        ("started", render.text(render.format_time(run.started_at))),
        ("completed", render.text(render.format_time(run.completed_at))),
        ("duration", render.text(render.format_duration(run_duration(run)))),
        ("worker", render.text(run.worker_id)),
        ("input", render.text(render.dumps(run.input))),
        ("output", render.text(None if run.output is None else render.dumps(run.output))),
    ]
    return render.key_values(rows)


def error_block(error: dict[str, Any]) -> Group:
    """The run's error: type and message, then its traceback in full."""
    head = Text("error  ", style="bold")
    head.append(str(error.get("type", "Error")), style="bold red")
    message = str(error.get("message", ""))
    if message:
        head.append(f": {message}")
    parts: list[Any] = [head]
    traceback = error.get("traceback")
    if traceback:
        parts.append(Text(str(traceback).rstrip("\n"), style="red"))
    for name, value in error.items():
        if name not in ("type", "message", "traceback"):
            parts.append(Text(f"{name}: {render.compact(value, 200)}", style="dim"))
    return Group(*parts)


def steps_table(steps: list[Step]) -> Table:
    """The run's steps: position, name, kind, status, attempts, duration, worker, error."""
    table = render.table(title="steps")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("worker", overflow="ellipsis", max_width=22)
    table.add_column("error", overflow="fold")
    for step in steps:
        table.add_row(
            render.text(step.position),
            render.text(step.name),
            render.text(step.kind),
            render.status_text(step.status),
            render.text(step.attempts),
            render.text(render.format_duration(step.duration)),
            render.text(step.worker_id),
            render.text(render.error_summary(step.error), style="red"),
        )
    return table


def history_table(events: list[HistoryEvent]) -> Table:
    """The run's timeline: time, event, step, attempt, duration, worker, detail."""
    table = render.table(title="history")
    table.add_column("at", no_wrap=True, min_width=23)
    # Never cut an event's name: the detail column wraps instead.
    table.add_column(
        "event", no_wrap=True, min_width=max((len(e.event) for e in events), default=5)
    )
    table.add_column("step", overflow="fold")
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("worker", overflow="ellipsis", max_width=22)
    table.add_column("detail", overflow="fold")
    for event in events:
        step = None
        if event.step_position is not None:
            step = f"{event.step_position} {event.step_name or ''}".strip()
        table.add_row(
            render.text(render.format_time_precise(event.at)),
            render.text(event.event),
            render.text(step),
            render.text(event.attempt),
            render.text(render.format_duration(event.duration)),
            render.text(event.worker_id),
            render.text(history_detail(event.detail)),
        )
    return table


def history_tracebacks(events: list[HistoryEvent]) -> list[Group]:
    """The tracebacks the history recorded (failed attempts, failed runs), oldest first."""
    blocks = []
    for event in events:
        traceback = (event.detail or {}).get("traceback")
        if not traceback:
            continue
        head = Text(f"{render.format_time_precise(event.at)}  {event.event}", style="bold")
        if event.step_name is not None:
            head.append(f"  {event.step_name}")
        if event.attempt is not None:
            head.append(f" (attempt {event.attempt})")
        blocks.append(Group(head, Text(str(traceback).rstrip("\n"), style="red")))
    return blocks


def history_detail(detail: dict[str, Any] | None) -> str | None:
    """A history event's detail on one line; an error shows as ``Type: message``."""
    if not detail:
        return None
    if "type" in detail and "message" in detail:
        return render.error_summary(detail)
    return render.compact(detail)


# `runs cancel`, `runs retry` (one run or by filter), `runs restart` and
# `runs fork` live in perdure.cli.manage.


def _steer(state: CliState, operation: str, ref: str, *args: str) -> None:
    """Cancel, pause or resume run ``ref`` and print the status it is left in."""
    with state.app() as app:
        run = getattr(app, operation)(ref, *args)
    click.echo(f"run {run.id} is {run.status.value}")


@runs.command("signal")
@click.argument("ref", metavar="ID_OR_KEY")
@click.argument("name")
@click.option("--data", default="null", help="The payload, as JSON (default: null).")
@click.option("--key", default=None, help="Idempotency key: the same key twice is one signal.")
@click.pass_obj
def signal(state: CliState, ref: str, name: str, data: str, key: str | None) -> None:
    """Send signal NAME to a run, waking it if it waits for that signal."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise click.BadParameter(f"--data is not valid JSON: {exc}", param_hint="--data") from exc
    with state.app() as app:
        signal_id = app.signal(ref, name, payload, key=key)
    click.echo(f"signal {name!r} recorded for run {ref} (signal id {signal_id})")


@runs.command("pause")
@click.argument("ref", metavar="ID_OR_KEY")
@click.pass_obj
def pause(state: CliState, ref: str) -> None:
    """Pause a run: no worker claims it until it is resumed."""
    _steer(state, "pause", ref)


@runs.command("resume")
@click.argument("ref", metavar="ID_OR_KEY")
@click.pass_obj
def resume(state: CliState, ref: str) -> None:
    """Resume a paused run, or wake a sleeping run now."""
    _steer(state, "resume", ref)


@runs.command("export")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in RunStatus]),
    help="Runs of this status (repeatable; default: every unfinished status).",
)
@click.option("--limit", default=1000, show_default=True, help="At most this many per status.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="-",
    help="File to write (default: stdout).",
)
@click.pass_obj
def export(state: CliState, statuses: tuple[str, ...], limit: int, output: str) -> None:
    """Write runs with their recorded steps as JSON, for `perdure check-replay --from`."""
    from perdure.testing.replay import IN_FLIGHT, export_runs

    with state.app() as app:
        exported = export_runs(app, statuses=statuses or IN_FLIGHT, limit=limit)
    text = json.dumps(exported, indent=2, default=str)
    if output == "-":
        click.echo(text)
    else:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
        click.echo(f"exported {len(exported)} run(s) to {output}", err=True)
