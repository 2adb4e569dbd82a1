"""``perdure workflows``: the workflow versions registered in the database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from perdure.cli import render, suggest
from perdure.cli.options import json_option

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.group()
def workflows() -> None:
    """Inspect registered workflows."""


@workflows.command("list")
@json_option("Print a JSON array instead of a table.")
@click.option(
    "--stranded",
    "only_stranded",
    is_flag=True,
    help="Only the versions with runs no live worker serves (exit code 3 if any).",
)
@click.pass_obj
def list_workflows(state: CliState, as_json: bool, only_stranded: bool) -> None:
    """List registered workflow versions: queue, live workers, run counts by status.

    A workflow started by emitted events shows its triggers under its kind
    (``on order.paid {"status": "ok"}``; under a batched trigger, ``batches of
    100/5s``: 100 events, or 5 s from the first). A workflow is registered when a
    worker serving it starts, or by ``perdure migrate --app APP``. A run is
    pinned to the version that started it and only a worker with that
    version claims it: a version without a live worker shows "none", and its
    queued runs wait.

    Under "runs", "stranded N" counts the version's unfinished runs that no
    live worker serves on their queue; under the table, one line per stranded
    version says what live workers serve instead and how to move the runs
    that have recorded nothing yet (`perdure runs move-version`). With
    --stranded only those versions are listed (with --json: the stranded
    versions, each with workflow, version, runs, queues and the versions
    live workers serve), and the exit code is 3 when there is one: a check
    for a deploy script.
    """
    with state.app() as app:
        found = app.workflows()
        waiting = app.stranded()
    if only_stranded:
        found = [w for w in found if w.stranded]
    if as_json:
        render.echo_json(waiting if only_stranded else found)
        if only_stranded and waiting:
            raise SystemExit(3)
        return
    out = render.console()
    if only_stranded and not waiting:
        out.print("no stranded version: a live worker serves every unfinished run", style="dim")
        return
    if not found and not waiting:
        out.print(
            "no workflow is registered; start a worker or run `perdure migrate --app APP`",
            style="dim",
        )
        return
    table = render.table()
    table.add_column("workflow", overflow="fold")
    table.add_column("version", justify="right", no_wrap=True)
    table.add_column("queue", overflow="fold")
    table.add_column("kind", overflow="fold")
    table.add_column("registered", no_wrap=True)
    table.add_column("workers", overflow="fold")
    table.add_column("runs", overflow="fold")
    for info in found:
        table.add_row(
            render.text(info.name),
            render.text(info.version),
            render.text(info.queue),
            kind_text(info.kind, info.definition),
            render.text(render.format_time(info.updated_at, seconds=False)),
            workers_text(info.workers),
            runs_text(info.counts, info.stranded),
        )
    out.print(render.fit(table, out.width))
    for entry in waiting:
        out.print(f"stranded: {entry.message}", style="red")
        if entry.served:
            out.print(
                f"  start a worker with version {entry.version}, or move the runs that recorded "
                f"nothing yet: perdure runs move-version --workflow {entry.workflow} "
                f"--version {entry.version} --to {max(entry.served)} --dry-run",
                style="dim",
            )
        else:
            out.print(f"  start a worker with version {entry.version}", style="dim")
    if any(info.counts_capped for info in found):
        out.print(
            "run counts are those of each workflow's newest 10,000 runs; "
            "`perdure runs list --workflow NAME` finds the others",
            style="dim",
        )
    if only_stranded and waiting:
        raise SystemExit(3)


def kind_text(kind: str, definition: dict[str, Any]) -> Text:
    """The workflow's kind, then one line per event trigger: ``on NAME MATCH``, and
    under a batched one ``batches of SIZE/WINDOWs``."""
    lines = [kind]
    for trigger in definition.get("on_event") or []:
        match = trigger.get("match") or {}
        lines.append(
            f"on {trigger.get('name')}" + (f" {render.compact(match, 40)}" if match else "")
        )
        if trigger.get("batch_size") is not None:
            lines.append(f"batches of {trigger['batch_size']}/{trigger['batch_window']:g}s")
    return render.text("\n".join(lines))


def runs_text(counts: dict[str, int], stranded: int) -> Text:
    """The run counts by status, then, in red, how many of them no live worker serves."""
    cell = render.counts_text(counts)
    if stranded:
        if cell.plain:
            cell.append("\n")
        cell.append(f"stranded {stranded}", style="bold red")
    return cell


def workers_text(workers: list[str]) -> Text:
    """The live workers serving a version, one per line, or "none" in red."""
    if not workers:
        return render.text("none", style="red")
    return render.text("\n".join(workers))


@workflows.command("show")
@click.argument("name")
@click.option("--version", type=int, help="This version (default: the newest registered).")
@json_option("Print the registry record as JSON.")
@click.pass_obj
def show_workflow(state: CliState, name: str, version: int | None, as_json: bool) -> None:
    """Show one registered workflow: its settings and, for a graph, its steps and edges."""
    with state.app() as app:
        every = app.workflows()
    found = [w for w in every if w.name == name]
    if version is not None:
        found = [w for w in found if w.version == version]
    if not found:
        which = name if version is None else f"{name} version {version}"
        hint = suggest.hint(name, {w.name for w in every})
        raise click.ClickException(f"no registered workflow {which}{hint}")
    info = max(found, key=lambda w: w.version)
    if as_json:
        render.echo_json(info)
        return
    out = render.console()
    out.print(
        render.key_values(
            [
                ("workflow", render.text(f"{info.name} (version {info.version})")),
                ("kind", render.text(info.kind)),
                ("queue", render.text(info.queue)),
                ("fingerprint", render.text(info.fingerprint)),
                ("registered", render.text(render.format_time(info.updated_at))),
                ("workers", workers_text(info.workers)),
                ("runs", render.counts_text(info.counts)),
            ]
        )
    )
    steps = info.definition.get("steps") if info.kind == "graph" else None
    if not steps:
        return
    out.print()
    table = render.table(title="steps")
    for column in ("#", "step", "depends on", "join", "when", "gate", "compensate", "retry"):
        table.add_column(column)
    for step in steps:
        retry = step.get("retry") or {}
        gate = step.get("signal")
        if gate and step.get("signal_timeout"):
            gate = f"{gate} ({render.format_duration(step['signal_timeout'])})"
        table.add_row(
            render.text(step["position"]),
            render.text(step["name"]),
            render.text(", ".join(step.get("depends_on") or []) or None),
            render.text(step.get("join")),
            render.text(step.get("when")),
            render.text(gate),
            render.text(step.get("compensate")),
            render.text(f"{retry['max_attempts']} attempts" if retry else None),
        )
    out.print(render.fit(table, out.width))
