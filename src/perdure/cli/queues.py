"""``perdure queues``: see queues and their load; change their concurrency limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.table import Table

from perdure.api.queues import UNSET, Limit
from perdure.cli import render
from perdure.types import QueueInfo

if TYPE_CHECKING:
    from perdure.cli.main import CliState

NO_LIMIT = ("none", "unlimited")


def parse_limit(value: str) -> int | None:
    """A limit from the command line: a whole number >= 1, or ``none`` for no limit."""
    if value.strip().lower() in NO_LIMIT:
        return None
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _limit_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Limit:
    """Parse a limit option with :func:`parse_limit`; UNSET when it is not given."""
    if value is None:
        return UNSET
    try:
        return parse_limit(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a whole number >= 1 nor 'none'", ctx, param
        ) from None


@click.group()
def queues() -> None:
    """See queues and change their concurrency limits."""


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_obj
def list_queues(state: CliState, as_json: bool) -> None:
    """List queues with their limits and their tasks: ready, running, waiting, paused.

    "-" is no limit. Waiting tasks are due later (sleeps, signal timeouts,
    retry backoffs); none of them holds a slot.
    """
    with state.app() as app:
        found = app.queues()
    render.listing(
        found, as_json, "no queue yet: queues appear with their first workflow or setting", _table
    )


def _table(found: list[QueueInfo]) -> Table:
    table = render.table()
    table.add_column("queue", overflow="fold")
    for column in ("concurrency", "per worker", "ready", "running", "waiting", "paused"):
        table.add_column(column, justify="right", no_wrap=True)
    for info in found:
        table.add_row(
            render.text(info.name),
            render.text(_limit(info.concurrency)),
            render.text(_limit(info.worker_concurrency)),
            render.text(info.ready),
            render.text(info.running, style="bold blue" if info.running else ""),
            render.text(info.waiting),
            render.text(info.paused),
        )
    return table


@queues.command("set")
@click.argument("name")
@click.option(
    "--concurrency",
    metavar="N|none",
    callback=_limit_option,
    help="Tasks of the queue running at once across all workers, or 'none' for no limit.",
)
@click.option(
    "--worker-concurrency",
    metavar="N|none",
    callback=_limit_option,
    help="Tasks of the queue one worker runs at once, or 'none' for no limit.",
)
@click.pass_obj
def set_queue(state: CliState, name: str, concurrency: Limit, worker_concurrency: Limit) -> None:
    """Change the limits of queue NAME; every worker's next claim uses them.

    Options left out keep their value. Running tasks are not stopped when a
    limit is lowered. A worker whose code declares a setting
    (app.queue(...)) writes its value back when it starts: change the code
    to make a change last.
    """
    if concurrency is UNSET and worker_concurrency is UNSET:
        raise click.UsageError("give --concurrency, --worker-concurrency or both")
    with state.app() as app:
        info = app.set_queue(name, concurrency=concurrency, worker_concurrency=worker_concurrency)
    click.echo(
        f"queue {info.name}: concurrency {_limit(info.concurrency)}, "
        f"per worker {_limit(info.worker_concurrency)}"
    )
