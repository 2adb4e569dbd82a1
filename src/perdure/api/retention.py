"""Retention from the API: ``app.prune(...)``, what ``perdure prune`` calls.

Workers prune on their own with ``prune_after=`` (``perdure worker
--prune-after 30d``); this is the same pass, run once, now. See
docs/operating.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from perdure.api.core import Core
from perdure.engine import arguments, retention
from perdure.errors import ConfigurationError, MaintenanceBusy
from perdure.types import PruneResult


async def prune(
    core: Core,
    finished_before: datetime | timedelta | float,
    *,
    archive: bool = False,
    batch_size: int = 1000,
    dry_run: bool = False,
) -> PruneResult:
    """Delete (or, with ``archive``, move) runs that finished before a time, in batches.

    ``finished_before`` is a time, or an age (a timedelta or seconds: runs
    that finished longer ago than that). Each batch of at most
    ``batch_size`` runs is one short transaction that skips rows others
    hold; live runs, runs with live children and children of live runs
    are never touched. Then the day partitions of history that end
    before the cutoff are dropped whole, and the emitted events (``app.emit``)
    recorded before it are deleted. ``dry_run`` only counts runs. Raises
    MaintenanceBusy while another pass (a worker's) runs on the schema.
    """
    arguments.flag("archive", archive)
    arguments.flag("dry_run", dry_run)
    arguments.integer("batch_size", batch_size, minimum=1, maximum=100_000)
    cutoff: datetime | None = None
    age: float | None = None
    if isinstance(finished_before, datetime):
        if finished_before.tzinfo is None:
            raise ConfigurationError(
                "finished_before must be a timezone-aware datetime, not a naive one"
            )
        cutoff = finished_before
    else:
        age = arguments.seconds("finished_before", finished_before, positive=True)
    result = await retention.maintenance_pass(
        await core.get_store(),
        prune_after=age,
        archive=archive,
        batch_size=batch_size,
        cutoff=cutoff,
        dry_run=dry_run,
    )
    if result is None:
        raise MaintenanceBusy()
    return result
