"""``perdure runs`` management commands: cancel and retry (one run or by filter),
restart, fork.

Attached to the ``runs`` group by ``attach``. A bulk command first shows
what it matches (``--dry-run`` stops there), then asks for confirmation
(``--yes`` skips the question) and acts on exactly the runs it showed, in
bounded batches: a run that moved on meanwhile is reported as skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from perdure.api.filters import RunFilter
from perdure.api.manage import CANCELLABLE, DEFAULT_BATCH, MAX_BATCH, RETRYABLE
from perdure.cli import render, run_filters
from perdure.cli.options import emit, json_option
from perdure.cli.run_filters import filter_options
from perdure.cli.runs import _steer
from perdure.types import BulkResult, RunRef

if TYPE_CHECKING:
    from perdure.api.app import App
    from perdure.cli.state import CliState

#: How many matched runs a preview lists before "... and N more".
PREVIEW_ROWS = 20

F = Callable[..., Any]


def _filter_options(fn: F) -> F:
    """The filter options of a bulk command (those of ``perdure runs list``) and its own."""
    options = [
        click.option("--dry-run", is_flag=True, help="Only show how many runs match, and which."),
        click.option("--yes", "-y", is_flag=True, help="Act without asking for confirmation."),
        click.option(
            "--batch-size",
            type=click.IntRange(1, MAX_BATCH),
            default=DEFAULT_BATCH,
            show_default=True,
            help="Runs changed per transaction.",
        ),
        click.option(
            "--limit", type=click.IntRange(min=1), help="At most this many runs, newest first."
        ),
        json_option("Print the outcome as JSON."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return filter_options(fn)


@click.command("cancel")
@click.argument("ref", metavar="[ID_OR_KEY]", required=False)
@click.option("--reason", default=None, help="Why, recorded in the runs' history.")
@_filter_options
@click.pass_obj
def cancel(state: CliState, /, ref: str | None, reason: str | None, **options: Any) -> None:
    """Cancel a run, or every unfinished run a filter matches.

    \b
    perdure runs cancel checkout:9182
    perdure runs cancel --workflow checkout --since 1h --dry-run
    perdure runs cancel --status waiting --workflow approval --yes
    """
    extra = () if reason is None else (reason,)
    if _single(options, ref):
        _steer(state, "cancel", str(ref), *extra, as_json=options["as_json"])
        return
    _bulk(state, "cancel", options, {} if reason is None else {"reason": reason})


@click.command("retry")
@click.argument("ref", metavar="[ID_OR_KEY]", required=False)
@_filter_options
@click.pass_obj
def retry(state: CliState, /, ref: str | None, **options: Any) -> None:
    """Retry a failed or cancelled run at its failed step, or every one a filter matches.

    \b
    perdure runs retry checkout:9182
    perdure runs retry --status failed --workflow checkout --since 1h --dry-run
    """
    if _single(options, ref):
        with state.app() as app:
            handle = app.retry(str(ref))
        emit(
            options["as_json"],
            {"id": handle.id, "status": "queued"},
            f"run {handle.id} queued again; it resumes at its failed step",
        )
        return
    _bulk(state, "retry", options, {})


def _single(options: dict[str, Any], ref: str | None) -> bool:
    """True for a command on one run; a usage error for a run and a filter, or neither."""
    criteria = [name for name, value in run_filters.criteria(options).items() if value]
    if ref is not None and criteria:
        raise click.UsageError(f"give a run or a filter, not both (--{criteria[0]} with {ref!r})")
    if ref is None and not criteria:
        raise click.UsageError(
            "give a run (ID_OR_KEY), or a filter: "
            + ", ".join("--" + name.replace("_", "-") for name in run_filters.CRITERIA)
        )
    if ref is not None and options["dry_run"]:
        raise click.UsageError("--dry-run previews a filter's runs; it takes no ID_OR_KEY")
    return ref is not None


def _bulk(state: CliState, operation: str, options: dict[str, Any], extra: dict[str, Any]) -> None:
    """Preview the runs a filter matches; unless --dry-run, confirm and act on exactly those."""
    wanted = RunFilter(**run_filters.criteria(options))
    as_json = options["as_json"]
    with state.app() as app:
        act = _operation(app, operation)
        preview = act(wanted, dry_run=True, limit=options["limit"], **extra)
        if options["dry_run"] or not preview.runs:
            _report(preview, as_json)
            applies = CANCELLABLE if operation == "cancel" else RETRYABLE
            if wanted.status is not None and wanted.status not in applies and not as_json:
                known = ", ".join(s.value for s in applies)
                render.err_console().print(f"{operation} applies to {known} runs", style="dim")
            return
        if not as_json:
            _report(preview, False)
        if not options["yes"]:
            click.confirm(
                f"{operation.capitalize()} these {preview.count} run(s)?", abort=True, err=True
            )
        # Exactly the runs shown: one created since is not touched.
        shown = dataclasses.replace(wanted, runs=tuple(r.id for r in preview.runs))
        _report(act(shown, batch_size=options["batch_size"], **extra), as_json)


def _operation(app: App, operation: str) -> Callable[..., BulkResult]:
    return app.cancel_runs if operation == "cancel" else app.retry_runs


_DONE = {"cancel": "cancelled", "retry": "queued again"}


def _report(result: BulkResult, as_json: bool) -> None:
    """Print a bulk result: JSON, or a line and the first runs as a table."""
    if as_json:
        render.echo_json(
            {
                "operation": result.operation,
                "dry_run": result.dry_run,
                "count": result.count,
                "runs": result.runs,
                "skipped": result.skipped,
            }
        )
        return
    out = render.console()
    if result.dry_run:
        verb = "would be cancelled" if result.operation == "cancel" else "would be retried"
        out.print(f"{result.count} run(s) {verb}" + (":" if result.runs else ""))
        if result.runs:
            out.print(render.fit(refs_table(result.runs[:PREVIEW_ROWS]), out.width))
        if result.count > PREVIEW_ROWS:
            out.print(f"... and {result.count - PREVIEW_ROWS} more", style="dim")
        return
    out.print(f"{result.count} run(s) {_DONE[result.operation]}")
    if result.skipped:
        out.print(
            f"{len(result.skipped)} run(s) skipped: their status changed before their batch came",
            style="yellow",
        )


def refs_table(refs: list[RunRef]) -> Table:
    """Runs as a bulk preview lists them: id, key, workflow, status, created."""
    table = render.table("run", "key", "workflow", "status", "created")
    now = datetime.now(UTC)
    for ref in refs:
        table.add_row(
            render.text(ref.id),
            render.text(ref.key),
            render.text(f"{ref.workflow}@{ref.version}"),
            render.status_text(ref.status),
            render.text(render.format_time_short(ref.created_at, now)),
        )
    return table


@click.command("restart")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--key", default=None, help="Idempotency key of the new run.")
@json_option("Print {id, restarted_from} as JSON.")
@click.pass_obj
def restart(state: CliState, ref: str, key: str | None, as_json: bool) -> None:
    """Start a run again from the beginning, as a new run with the same input."""
    with state.app() as app:
        run = app.restart(ref, key=key).get()
    emit(
        as_json,
        {"id": run.id, "restarted_from": run.restarted_from},
        f"run {run.id} restarts run {run.restarted_from} from the beginning",
    )


@click.command("fork")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--from-step", "step", metavar="NAME", help="Execute again from this step.")
@click.option(
    "--from-position",
    "position",
    type=click.IntRange(min=0),
    help="Execute again from this position (function workflows).",
)
@click.option("--key", default=None, help="Idempotency key of the new run.")
@json_option("Print {id, forked_from, fork_step, copied_steps} as JSON.")
@click.pass_obj
def fork(
    state: CliState,
    ref: str,
    step: str | None,
    position: int | None,
    key: str | None,
    as_json: bool,
) -> None:
    """Start a new run that reuses a run's recorded steps before NAME and executes the rest.

    Function workflows copy the steps at lower positions; graph workflows the
    steps that are not downstream of NAME.
    """
    if (step is None) == (position is None):
        raise click.UsageError("give exactly one of --from-step NAME and --from-position N")
    target: str | int
    if step is not None:
        target = step
    else:
        assert position is not None
        target = position
    with state.app() as app:
        handle = app.fork(ref, from_step=target, key=key)
        run = handle.get()
        created = app.history(handle.id)[0].detail or {}
    copied = created.get("copied_steps", 0)
    emit(
        as_json,
        {
            "id": handle.id,
            "forked_from": run.forked_from,
            "fork_step": run.fork_step,
            "copied_steps": copied,
        },
        f"run {handle.id} forks run {run.forked_from} at step {run.fork_step!r}: "
        f"{copied} recorded step(s) reused, the rest executes again",
    )


def attach(group: click.Group) -> None:
    """Add the management commands to the ``runs`` group (replacing its one-run cancel/retry)."""
    for command in (cancel, retry, restart, fork):
        group.add_command(command)
