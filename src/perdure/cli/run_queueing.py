"""What ``perdure runs`` shows of queueing and versions: tags, partition, who can run a run.

A run waits for a worker that has its version: a queued run of a version no
live worker serves is marked in ``runs list`` and ``runs show``.
"""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from perdure.cli import render
from perdure.types import Run, RunStatus


def tags_option(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str] | None:
    """Parse repeated ``--tag NAME=VALUE`` into a dict (None when none is given)."""
    tags: dict[str, str] = {}
    for item in value:
        name, equals, text = item.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", ctx, param)
        tags[name] = text
    return tags or None


def unserved_versions(app: Any, found: list[Run]) -> set[tuple[str, int]]:
    """The (workflow, version) pairs of queued runs in ``found`` that no live worker has."""
    queued = {(r.workflow, r.version) for r in found if r.status == RunStatus.QUEUED}
    if not queued:
        return set()
    served = {(w.name, w.version) for w in app.workflows() if w.workers}
    return queued - served


def waits_for(run: Run, unserved: set[tuple[str, int]]) -> str | None:
    """What a queued run waits for when no live worker has its version."""
    if run.status != RunStatus.QUEUED or (run.workflow, run.version) not in unserved:
        return None
    return f"a worker with {run.workflow} version {run.version}"


def queueing_rows(run: Run) -> list[tuple[str, Text | str]]:
    """The run's queueing attributes that are set: priority, partition, dedup key, tags."""
    rows: list[tuple[str, Text | str]] = []
    if run.priority:
        rows.append(("priority", render.text(run.priority)))
    for label, value in (("partition", run.partition_key), ("dedup key", run.dedup_key)):
        if value is not None:
            rows.append((label, render.text(value)))
    if run.tags:
        rows.append(("tags", render.text(" ".join(f"{k}={v}" for k, v in run.tags.items()))))
    return rows
