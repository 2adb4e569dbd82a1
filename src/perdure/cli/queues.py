"""``perdure queues``: see queues and their load; change their limits."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click
from rich.table import Table

from perdure.api.queues import UNSET, Limit, Rate, Unset
from perdure.cli import render, suggest
from perdure.cli.options import json_option
from perdure.types import QueueInfo

if TYPE_CHECKING:
    from perdure.cli.state import CliState

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
    """Parse a limit option with ``parse_limit``; UNSET when it is not given."""
    if value is None:
        return UNSET
    try:
        return parse_limit(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a whole number >= 1 nor 'none'", ctx, param
        ) from None


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(value: str) -> tuple[int, float] | None:
    """A rate limit from the command line: ``N/PERIOD`` or ``none``.

    PERIOD is seconds (``10/30``), or a number with a unit s, m, h or d
    (``100/1m``), or a unit alone for one of it (``5/s``).
    """
    if value.strip().lower() in NO_LIMIT:
        return None
    match = _RATE.match(value)
    if not match or not (match.group(2) or match.group(3)):
        raise ValueError(value)
    amount = float(match.group(2) or 1) * _UNIT_SECONDS[(match.group(3) or "s").lower()]
    count = int(match.group(1))
    if count < 1 or amount <= 0:
        raise ValueError(value)
    return count, amount


def _rate_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Rate:
    """Parse ``--rate-limit`` with ``parse_rate``; UNSET when it is not given."""
    if value is None:
        return UNSET
    try:
        return parse_rate(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither N/PERIOD (10/1m, 5/s, 100/30) nor 'none'", ctx, param
        ) from None


@click.group()
def queues() -> None:
    """See queues and change their limits."""


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def rate_text(info: QueueInfo) -> str:
    """A queue's rate limit as ``N/period`` (``per key`` when it is), or ``-``."""
    if info.rate_limit is None or info.rate_period is None:
        return "-"
    text = f"{info.rate_limit}/{render.format_duration(info.rate_period)}"
    return f"{text} per key" if info.rate_per_key else text


@queues.command("list")
@json_option("Print a JSON array instead of a table.")
@click.pass_obj
def list_queues(state: CliState, as_json: bool) -> None:
    """List queues with their limits and their tasks: ready, running, waiting, paused.

    "-" is no limit. Ready tasks (the depth) are due now and wait for a
    worker; "oldest" is how long the oldest of them has been due. Waiting
    tasks are due later (sleeps, signal timeouts, retry backoffs); none of
    them holds a slot.
    """
    with state.app() as app:
        found = app.queues()
    render.listing(
        found, as_json, "no queue yet: queues appear with their first workflow or setting", _table
    )


def _table(found: list[QueueInfo]) -> Table:
    table = render.table()
    table.add_column("queue")
    for column in ("concurrency", "per worker", "per key", "rate"):
        table.add_column(column, justify="right", no_wrap=True)
    for column in ("ready", "running", "waiting", "paused", "oldest"):
        table.add_column(column, justify="right", no_wrap=True)
    for info in found:
        table.add_row(
            render.text(info.name),
            render.text(_limit(info.concurrency)),
            render.text(_limit(info.worker_concurrency)),
            render.text(_limit(info.partition_concurrency)),
            render.text(rate_text(info)),
            render.text(info.ready),
            render.text(info.running, style="bold blue" if info.running else ""),
            render.text(info.waiting),
            render.text(info.paused),
            render.text(render.format_duration(info.oldest_seconds)),
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
@click.option(
    "--partition-concurrency",
    metavar="N|none",
    callback=_limit_option,
    help="Tasks of one partition key running at once, or 'none' for no limit.",
)
@click.option(
    "--rate-limit",
    metavar="N/PERIOD|none",
    callback=_rate_option,
    help="At most N tasks claimed per PERIOD across all workers (10/1m, 5/s), or 'none'.",
)
@click.option(
    "--rate-per-key/--rate-per-queue",
    default=None,
    help="Count the rate limit per partition key, or for the whole queue.",
)
@json_option("Print the queue's settings as JSON.")
@click.pass_obj
def set_queue(
    state: CliState,
    name: str,
    concurrency: Limit,
    worker_concurrency: Limit,
    partition_concurrency: Limit,
    rate_limit: Rate,
    rate_per_key: bool | None,
    as_json: bool,
) -> None:
    """Change the limits of queue NAME; every worker's next claim uses them.

    Options left out keep their value. Running tasks are not stopped when a
    limit is lowered. A worker whose code declares a setting
    (app.queue(...)) writes its value back when it starts: change the code
    to make a change last.
    """
    per_key: bool | Unset = UNSET if rate_per_key is None else rate_per_key
    settings = (concurrency, worker_concurrency, partition_concurrency, rate_limit, per_key)
    if all(value is UNSET for value in settings):
        raise click.UsageError(
            "give --concurrency, --worker-concurrency, --partition-concurrency, --rate-limit "
            "or --rate-per-key/--rate-per-queue"
        )
    with state.app() as app:
        known = {q.name for q in app.queues()}
        if name not in known and suggest.hint(name, known):
            # A new queue: set, but a close existing name is likely what was meant.
            render.err_console().print(
                f"warning: queue {name!r} is new{suggest.hint(name, known)}",
                style="yellow",
                soft_wrap=True,
            )
        info = app.set_queue(
            name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            partition_concurrency=partition_concurrency,
            rate_limit=rate_limit,
            rate_per_key=per_key,
        )
    if as_json:
        render.echo_json(info)
        return
    click.echo(
        f"queue {info.name}: concurrency {_limit(info.concurrency)}, "
        f"per worker {_limit(info.worker_concurrency)}, "
        f"per key {_limit(info.partition_concurrency)}, rate {rate_text(info)}"
    )
