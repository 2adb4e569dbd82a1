"""``perdure runs``: list, show, signal, pause and resume runs (see also cli.manage)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from perdure.cli import render, suggest, times, tracebacks
from perdure.cli.options import emit, json_option
from perdure.cli.run_filters import filter_options
from perdure.cli.run_queueing import queueing_rows, unserved_versions, waits_for
from perdure.types import HistoryEvent, Run, RunStatus, Step

if TYPE_CHECKING:
    from perdure.api.app import App
    from perdure.cli.state import CliState

#: Kept for callers of the earlier name: see ``perdure.cli.times.parse_point``.
parse_since = times.parse_point


@click.group()
def runs() -> None:
    """Inspect runs and act on them (by id or by key)."""


@runs.command("list")
@filter_options
@click.option("--archived", is_flag=True, help="List archived runs (perdure prune --archive).")
@click.option(
    "--cursor",
    help="Start after this cursor (printed under the previous page; next_cursor in --json).",
)
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="At most N runs."
)
@json_option('Print {"runs": [...], "next_cursor": ...} instead of a table.')
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
        hints = [] if found or as_json else _empty_hints(app, filters)
    if as_json:
        # One JSON document: the page, and the cursor of the next one (null at the end).
        document: dict[str, Any] = {"runs": list(found), "next_cursor": found.next_cursor}
        read_from = state.lag()
        if read_from is not None:
            document["read_from"] = read_from
        render.echo_json(document)
        return
    state.note_lag()
    render.listing(found, False, "no runs match", lambda runs: runs_table(runs, unserved))
    for line in hints:
        render.err_console().print(line, style="yellow", soft_wrap=True)
    if found.next_cursor is not None:
        render.err_console().print(
            f"next page: --cursor {found.next_cursor}", style="dim", soft_wrap=True
        )


def _empty_hints(app: App, filters: dict[str, Any]) -> list[str]:
    """For an empty listing: a --workflow or --queue that names nothing, with the nearest names."""
    hints = []
    if filters.get("workflow"):
        known = {w.name for w in app.registered_workflows()}
        if filters["workflow"] not in known:
            hint = suggest.hint(filters["workflow"], known)
            hints.append(f"no workflow named {filters['workflow']!r} is registered{hint}")
    if filters.get("queue"):
        queues = {q.name for q in app.queues()}
        if filters["queue"] not in queues:
            hint = suggest.hint(filters["queue"], queues)
            hints.append(f"no queue named {filters['queue']!r}{hint}")
    return hints


def runs_table(found: list[Run], unserved: set[tuple[str, int]] | None = None) -> Table:
    """The runs as a table; each run's key is on the line under its id.

    A queued run whose version no live worker has says so under its status.
    Every cell stays on its line: on a narrow terminal (80 columns) the
    worker and steps columns make way and a long workflow name ends in "…".
    """
    now = datetime.now(UTC)
    rows = []
    for run in found:
        ident = render.text(run.id)
        if run.key is not None:
            ident.append("\n")
            key = run.key if len(run.key) <= len(run.id) else run.key[: len(run.id) - 1] + "…"
            ident.append(key, style="dim")
        status = render.status_text(run.status)
        if waits_for(run, unserved or set()):
            status.append(f"\nno worker has v{run.version}", style="dim")
        rows.append(
            [
                ident,
                render.text(f"{run.workflow}@{run.version}"),
                status,
                render.text(render.format_time_short(run.created_at, now)),
                render.text(render.format_duration(run_duration(run, now))),
                render.text(run.steps_completed),
                render.text(run.worker_id),
            ]
        )
    names = ["run (key)", "workflow", "status", "created", "took", "steps", "worker"]
    widest = [
        max([len(name)] + [max(map(len, row[i].plain.split("\n"))) for row in rows])
        for i, name in enumerate(names)
    ]
    width = render.console().width
    # Columns kept: all, then without worker, then without steps, while they do not fit.
    keep = len(names)
    while keep > 5 and not _fits(widest[:keep], width, flexible=(1, 6)):
        keep -= 1
    table = render.table()
    for name in names[:keep]:
        table.add_column(
            name,
            # The workflow and the worker are cut to fit (render.fit), the rest is kept.
            no_wrap=name not in ("workflow", "worker"),
            justify="right" if name in ("took", "steps") else "left",
        )
    for row in rows:
        table.add_row(*row[:keep])
    return render.fit(table, width)


def _fits(widths: list[int], width: int, flexible: tuple[int, ...]) -> bool:
    """Whether columns of these widths fit ``width`` with each flexible one at 10 or more."""
    fixed = sum(w for i, w in enumerate(widths) if i not in flexible)
    cut = sum(min(w, 10) for i, w in enumerate(widths) if i in flexible)
    return fixed + cut + 2 * (len(widths) - 1) <= width


def run_duration(run: Run, now: datetime | None = None) -> float | None:
    """How long the run has taken: start to finish, or start to now while it is live."""
    if run.status.is_final:
        return render.elapsed(run.started_at, run.completed_at or run.updated_at)
    return render.elapsed(run.started_at, None, now)


@runs.command("show")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--history", "with_history", is_flag=True, help="Also show the run's history.")
@click.option(
    "--traceback",
    "full_traceback",
    is_flag=True,
    help="Show the whole traceback, perdure's and the standard library's frames too.",
)
@click.option("--full", is_flag=True, help="Show long inputs and outputs whole.")
@json_option("Print JSON instead of tables.")
@click.pass_obj
def show(
    state: CliState,
    ref: str,
    with_history: bool,
    full_traceback: bool,
    full: bool,
    as_json: bool,
) -> None:
    """Show one run: its record, its steps and, with --history, what happened to it.

    A failed run's error is shown once, with the frames of your code first
    (--traceback for all of them). Long inputs and outputs are cut to their
    first lines (--full for all).
    """
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
    out.print(run_header(run, unserved, full))
    if run.error:
        out.print()
        out.print(error_block(run.error, full_traceback))
    out.print()
    out.print(steps_table(steps) if steps else Text("no steps recorded", style="dim"))
    if children:
        out.print()
        out.print(Text(f"child runs ({len(children)})", style="bold"))
        out.print(runs_table(children, unserved))
    if events is not None:
        out.print()
        out.print(history_table(events) if events else Text("no history", style="dim"))
        # The run's own error is shown above: the history adds the attempts' tracebacks.
        for block in history_tracebacks(events, skip=run.error, full=full_traceback):
            out.print()
            out.print(block)


def run_header(run: Run, unserved: set[tuple[str, int]] | None = None, full: bool = False) -> Table:
    """The run's record as ``label  value`` lines; a long input or output cut unless ``full``."""
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
    if run.continued_from:
        rows.append(("continued from", render.text(run.continued_from)))
    if run.continued_to:
        rows.append(("continued to", render.text(run.continued_to)))
    rows += [
        ("created", render.text(render.format_time(run.created_at))),
        ("started", render.text(render.format_time(run.started_at))),
        ("completed", render.text(render.format_time(run.completed_at))),
        ("duration", render.text(render.format_duration(run_duration(run)))),
        ("worker", render.text(run.worker_id)),
        ("input", render.text(render.abbreviated(run.input, full))),
        (
            "output",
            render.text(None if run.output is None else render.abbreviated(run.output, full)),
        ),
    ]
    return render.key_values(rows)


def error_block(error: dict[str, Any], full: bool = False) -> Group:
    """The run's error: type and message, then its traceback, the user's frames only
    unless ``full``."""
    head = Text("error  ", style="bold")
    head.append(str(error.get("type", "Error")), style="bold red")
    message = str(error.get("message", ""))
    if message:
        head.append(f": {message}")
    parts: list[Any] = [head]
    traceback = error.get("traceback")
    if traceback:
        parts += traceback_parts(str(traceback), full, f"{error.get('type')}: {message}")
    for name, value in error.items():
        if name not in ("type", "message", "traceback"):
            parts.append(Text(f"{name}: {render.compact(value, 200)}", style="dim"))
    return Group(*parts)


def steps_table(steps: list[Step]) -> Table:
    """The run's steps: position, name, kind, status, attempts, duration, worker, error."""
    table = render.table(title="steps")
    table.add_column("#", justify="right", no_wrap=True)
    # Cells stay on one line (render.fit): name, worker and error are cut to fit;
    # the run's error is shown whole above the table.
    table.add_column("name")
    table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("worker")
    table.add_column("error")
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
    return render.fit(table)


def history_table(events: list[HistoryEvent]) -> Table:
    """The run's timeline: time, event, step, attempt, duration, worker, detail."""
    table = render.table(title="history")
    # On a narrow terminal the time of day only (the run's dates are in its header).
    narrow = render.console().width < 110
    table.add_column("at", no_wrap=True)
    # Never cut an event's name: the detail column is cut instead.
    table.add_column(
        "event", no_wrap=True, min_width=max((len(e.event) for e in events), default=5)
    )
    # One line per event (render.fit): the tracebacks are under the table.
    table.add_column("step")
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("worker")
    table.add_column("detail")
    for event in events:
        step = None
        if event.step_position is not None:
            step = f"{event.step_position} {event.step_name or ''}".strip()
        at = render.format_time_precise(event.at)
        table.add_row(
            render.text(at[11:] if narrow and at != render.NONE else at),
            render.text(event.event),
            render.text(step),
            render.text(event.attempt),
            render.text(render.format_duration(event.duration)),
            render.text(event.worker_id),
            render.text(history_detail(event.detail)),
        )
    return render.fit(table)


def traceback_parts(traceback: str, full: bool, shown: str = "") -> list[Text]:
    """A traceback's lines: the user's frames only (and a note of what was hidden) unless
    ``full``. Its last line is left out when it repeats ``shown``, the error's head."""
    lines = traceback.rstrip("\n").splitlines()
    hidden = 0
    if not full:
        trimmed = tracebacks.user_frames(traceback)
        lines, hidden = trimmed.lines, trimmed.hidden
    if lines and shown and lines[-1].strip() == shown.strip():
        lines = lines[:-1]
    parts = [Text("\n".join(lines), style="red")]
    if hidden:
        parts.append(
            Text(
                f"({hidden} frame(s) of perdure and the standard library hidden: --traceback)",
                style="dim",
            )
        )
    return parts


def history_tracebacks(
    events: list[HistoryEvent], skip: dict[str, Any] | None = None, full: bool = False
) -> list[Group]:
    """The tracebacks the history recorded (failed attempts, failed runs), oldest first.

    One that is the ``skip`` error's (the run's own, already shown) is left out.
    """
    blocks = []
    for event in events:
        traceback = (event.detail or {}).get("traceback")
        if not traceback or (skip is not None and traceback == skip.get("traceback")):
            continue
        head = Text(f"{render.format_time_precise(event.at)}  {event.event}", style="bold")
        if event.step_name is not None:
            head.append(f"  {event.step_name}")
        if event.attempt is not None:
            head.append(f" (attempt {event.attempt})")
        blocks.append(Group(head, *traceback_parts(str(traceback), full)))
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


def _steer(state: CliState, operation: str, ref: str, *args: str, as_json: bool = False) -> None:
    """Cancel, pause or resume run ``ref`` and print the status it is left in."""
    with state.app() as app:
        run = getattr(app, operation)(ref, *args)
    emit(as_json, {"id": run.id, "status": run.status}, f"run {run.id} is {run.status.value}")


@runs.command("signal")
@click.argument("ref", metavar="ID_OR_KEY")
@click.argument("name")
@click.option("--data", default="null", help="The payload, as JSON (default: null).")
@click.option("--key", default=None, help="Idempotency key: the same key twice is one signal.")
@json_option("Print {run, signal, signal_id} as JSON.")
@click.pass_obj
def signal(state: CliState, ref: str, name: str, data: str, key: str | None, as_json: bool) -> None:
    """Send signal NAME to a run, waking it if it waits for that signal.

    A signal the run does not wait for is kept until it does. When the run
    waits for a signal of a close name (``aproved`` sent, ``approved``
    awaited), a warning on stderr says so.
    """
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise click.BadParameter(f"--data is not valid JSON: {exc}", param_hint="--data") from exc
    with state.app() as app:
        run = app.get_run(ref)
        awaited = (run.waiting_for or {}).get("signal")
        signal_id = app.signal(run.id, name, payload, key=key)
    if isinstance(awaited, str) and awaited != name:
        hint = suggest.hint(name, [awaited])
        if hint:
            render.err_console().print(
                f"warning: run {ref} waits for signal {awaited!r}, not {name!r}{hint} "
                f"(the signal {name!r} is kept until the run waits for it)",
                style="yellow",
                soft_wrap=True,
            )
    emit(
        as_json,
        {"run": run.id, "signal": name, "signal_id": signal_id, "waiting_for": awaited},
        f"signal {name!r} recorded for run {ref} (signal id {signal_id})",
    )


@runs.command("pause")
@click.argument("ref", metavar="ID_OR_KEY")
@json_option("Print {id, status} as JSON.")
@click.pass_obj
def pause(state: CliState, ref: str, as_json: bool) -> None:
    """Pause a run: no worker claims it until it is resumed."""
    _steer(state, "pause", ref, as_json=as_json)


@runs.command("resume")
@click.argument("ref", metavar="ID_OR_KEY")
@json_option("Print {id, status} as JSON.")
@click.pass_obj
def resume(state: CliState, ref: str, as_json: bool) -> None:
    """Resume a paused run, or wake a sleeping run now."""
    _steer(state, "resume", ref, as_json=as_json)


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
@json_option("Accepted for symmetry: the export is JSON already.")
@click.pass_obj
def export(
    state: CliState, statuses: tuple[str, ...], limit: int, output: str, as_json: bool
) -> None:
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
