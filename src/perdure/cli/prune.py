"""``perdure prune``: delete or archive finished runs and drop old history partitions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click

from perdure.cli import render, times
from perdure.cli.options import json_option

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command()
@click.option(
    "--finished-before",
    "finished_before",
    required=True,
    metavar="DURATION|ISO",
    callback=times.age_or_point_option,
    help="Runs that finished this long ago (30d, 12h, 2w) or before this ISO time.",
)
@click.option("--archive", is_flag=True, help="Move them to the archive tables instead.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Runs per batch; each batch is one short transaction.",
)
@click.option("--dry-run", is_flag=True, help="Only count what would go.")
@json_option("Print the outcome as JSON.")
@click.pass_obj
def prune(
    state: CliState,
    finished_before: timedelta | datetime,
    archive: bool,
    batch_size: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete (or --archive) finished runs with their steps, tasks, history and signals.

    Runs still live, runs with live children and children of live runs are
    left alone; the work goes in batches while workers keep working. Then the
    day partitions of history older than the cutoff are dropped whole, and
    the emitted events recorded before the cutoff are deleted. Workers can do
    this by themselves: perdure worker --prune-after 30d.
    """
    with state.app() as app:
        result = app.prune(finished_before, archive=archive, batch_size=batch_size, dry_run=dry_run)
    if as_json:
        render.echo_json(result)
        return
    verb = "archived" if archive else "deleted"
    cutoff = render.format_time(result.cutoff)
    if dry_run:
        click.echo(f"would have {verb} {result.runs} run(s) that finished before {cutoff}")
    else:
        click.echo(
            f"{verb} {result.runs} run(s) that finished before {cutoff}, "
            f"in {result.batches} batch(es)"
        )
    if result.events:
        click.echo(f"deleted {result.events} emitted event(s) recorded before {cutoff}")
    dropped = ", ".join(result.partitions) or "none"
    click.echo(f"history partitions {'to drop' if dry_run else 'dropped'}: {dropped}")
    if result.postponed:
        click.echo(
            "some history partitions were busy (writers held their locks); "
            "the next prune drops them",
            err=True,
        )
