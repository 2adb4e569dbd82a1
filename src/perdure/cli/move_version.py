"""``perdure runs move-version``: move runs no worker serves to another workflow version.

Only runs that have recorded nothing yet (no step, sleep or wait) move; the
others stay pinned to their version and are reported as skipped, with why.
Like the other bulk commands it shows what it matches first (``--dry-run``
stops there), asks for confirmation (``--yes`` skips it) and then acts on
exactly the runs it showed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from perdure.api.filters import RunFilter
from perdure.cli import render, run_filters
from perdure.cli.options import json_option
from perdure.cli.run_filters import filter_options
from perdure.types import MovedRuns

if TYPE_CHECKING:
    from perdure.cli.state import CliState

#: What each reason a run stays means, for the human report.
REASONS = {
    "recorded": "it has recorded steps and stays pinned to its version",
    "held": "a worker is executing it",
    "not movable": "not an unfinished run of this workflow version",
}


@click.command("move-version")
@click.argument("ref", metavar="[RUN_ID]...", nargs=-1)
@click.option(
    "--to",
    "to_version",
    type=click.IntRange(min=1),
    required=True,
    help="The version to move the runs to (registered, served by live workers).",
)
@click.option("--dry-run", is_flag=True, help="Only show which runs would move, and which stay.")
@click.option("--yes", "-y", is_flag=True, help="Move without asking for confirmation.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many runs, newest first.")
@json_option("Print the outcome as JSON.")
@filter_options
@click.pass_obj
def move_version(state: CliState, /, ref: tuple[str, ...], to_version: int, **options: Any) -> None:
    """Move runs of --workflow at --version that recorded nothing yet to version --to.

    For runs that wait because no live worker serves their version
    (`perdure workflows list --stranded`). Give run ids, or filter options
    (--queue, --since, --tag, ...), or neither for every unfinished run of
    that version. Runs that have recorded steps stay pinned and are reported
    as skipped.

    \b
    perdure runs move-version --workflow checkout --version 1 --to 2 --dry-run
    perdure runs move-version --workflow checkout --version 1 --to 2 --yes
    perdure runs move-version 0b5c...e1 --workflow checkout --version 1 --to 2
    """
    criteria = run_filters.criteria(options)
    workflow, version = criteria.pop("workflow"), criteria.pop("version")
    if not workflow or version is None:
        raise click.UsageError("give the runs' --workflow and their --version (and --to)")
    wanted = RunFilter(**criteria, runs=ref or None)
    as_json = options["as_json"]
    with state.app() as app:
        preview = app.move_runs(
            workflow, version, to_version, filter=wanted, dry_run=True, limit=options["limit"]
        )
        if options["dry_run"] or not preview.moved:
            _report(preview, as_json)
            return
        if not as_json:
            _report(preview, False)
        if not options["yes"]:
            click.confirm(
                f"Move these {preview.count} run(s) to version {to_version}?", abort=True, err=True
            )
        shown = dataclasses.replace(wanted, runs=tuple(preview.moved))
        done = app.move_runs(workflow, version, to_version, filter=shown)
        # Runs skipped at preview are part of the outcome too.
        left = {s.run_id for s in done.skipped}
        skipped = done.skipped + [s for s in preview.skipped if s.run_id not in left]
        _report(dataclasses.replace(done, skipped=skipped), as_json)


def _report(result: MovedRuns, as_json: bool) -> None:
    """Print what moved (or would) and what stays, with why."""
    if as_json:
        render.echo_json(
            {
                "workflow": result.workflow,
                "from_version": result.from_version,
                "to_version": result.to_version,
                "dry_run": result.dry_run,
                "count": result.count,
                "moved": result.moved,
                "skipped": [{"run": s.run_id, "reason": s.reason} for s in result.skipped],
            }
        )
        return
    out = render.console()
    where = f"{result.workflow}@{result.from_version} to version {result.to_version}"
    verb = "would move" if result.dry_run else "moved"
    out.print(f"{result.count} run(s) of {where} {verb}")
    for run_id in result.moved[:20]:
        out.print(f"  {run_id}")
    if result.count > 20:
        out.print(f"  ... and {result.count - 20} more", style="dim")
    if result.skipped:
        out.print(f"{len(result.skipped)} run(s) skipped:", style="yellow")
        for skipped in result.skipped[:20]:
            out.print(f"  {skipped.run_id}: {REASONS.get(skipped.reason, skipped.reason)}")
        if len(result.skipped) > 20:
            out.print(f"  ... and {len(result.skipped) - 20} more", style="dim")
