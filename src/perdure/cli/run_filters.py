"""The run filter options shared by ``perdure runs list`` and the bulk commands.

Each option is named as a field of [`perdure.RunFilter`][perdure.RunFilter], so a command
passes ``{name: value for name in CRITERIA}`` on as its filter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from perdure.cli import times
from perdure.cli.run_queueing import tags_option
from perdure.types import RunStatus

F = Callable[..., Any]

#: The filter options' parameter names: RunFilter's fields.
CRITERIA = (
    "status",
    "workflow",
    "version",
    "queue",
    "worker",
    "key_prefix",
    "since",
    "before",
    "parent",
    "tags",
)

_OPTIONS = [
    click.option(
        "--status",
        type=click.Choice([s.value for s in RunStatus]),
        help="Only runs in this status.",
    ),
    click.option("--workflow", help="Only runs of this workflow."),
    click.option("--version", type=click.IntRange(min=1), help="Only runs of this version."),
    click.option("--queue", help="Only runs of this queue."),
    click.option("--worker", metavar="WORKER_ID", help="Only runs last claimed by this worker."),
    click.option("--key-prefix", metavar="PREFIX", help="Only runs whose key starts with PREFIX."),
    click.option("--parent", metavar="RUN_ID", help="Only the child runs of this run."),
    click.option(
        "--since",
        metavar="DURATION|ISO",
        callback=times.point_option,
        help="Only runs created since: 30m, 2h, 7d (ago) or an ISO timestamp (naive means UTC).",
    ),
    click.option(
        "--until",
        "--before",
        "before",
        metavar="DURATION|ISO",
        callback=times.point_option,
        help="Only runs created before: 30m, 2h, 7d (ago) or an ISO timestamp.",
    ),
    click.option(
        "--tag",
        "tags",
        multiple=True,
        metavar="NAME=VALUE",
        callback=tags_option,
        help="Only runs with this tag (repeatable: runs with every one).",
    ),
]


def filter_options(fn: F) -> F:
    """Add the run filter options (see ``CRITERIA``) to a click command."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def criteria(options: dict[str, Any]) -> dict[str, Any]:
    """The filter criteria among a command's parameters."""
    return {name: options[name] for name in CRITERIA}
