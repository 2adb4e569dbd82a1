"""Reading runs: find one by id or key, list them, their steps and history, wait for results.

Also the observability reads the dashboard is built on ([`count_runs`][perdure.App.count_runs],
[`run_activity`][perdure.App.run_activity], held tasks), each served by an index so that its cost
does not grow with finished runs. Listings and counts take the criteria of
one [`RunFilter`][perdure.RunFilter].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from perdure.api import listing
from perdure.api.core import Core
from perdure.api.filters import RunFilter
from perdure.api.handle import RunHandle
from perdure.engine import arguments
from perdure.errors import ConfigurationError
from perdure.types import (
    HistoryEvent,
    Run,
    RunPage,
    RunStatus,
    Step,
    WorkerInfo,
    WorkflowInfo,
)


async def get_run(core: Core, ref: str) -> Run:
    """The run with id (or key) ``ref``, live or archived; RunNotFound if there is none."""
    return await core.find(ref)


async def handle(core: Core, ref: str) -> RunHandle:
    """A handle on the existing run with id (or key) ``ref``."""
    return RunHandle(core.owner, (await core.find(ref)).id, created=False)


async def list_runs(
    core: Core,
    *,
    status: RunStatus | str | None = None,
    workflow: str | None = None,
    version: int | None = None,
    queue: str | None = None,
    worker: str | None = None,
    key_prefix: str | None = None,
    since: datetime | None = None,
    before: datetime | None = None,
    parent: str | None = None,
    tags: dict[str, str] | None = None,
    runs: Sequence[str] | None = None,
    archived: bool = False,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    """One page of runs, newest first (by ``created_at``, then id), filtered.

    Each filter left None selects any value: ``status``, ``workflow``,
    ``version``, ``queue``, ``worker`` (the id of the worker that last
    claimed the run), ``key_prefix`` (keys that start with it),
    ``since`` (created at or after) and ``before`` (created before), and
    ``parent`` (the children of that run), ``tags`` (runs whose tags
    include every given pair), ``runs`` (only these run ids): the
    criteria of [`perdure.RunFilter`][perdure.RunFilter]. ``archived=True`` lists the
    runs ``perdure prune --archive`` moved to the archive instead. The
    page is a list of at most ``limit`` runs; its ``next_cursor``, passed
    as ``cursor=``, gives the page after it (None on the last page).
    """
    filters = RunFilter(
        status=status,
        workflow=workflow,
        version=version,
        queue=queue,
        worker=worker,
        key_prefix=key_prefix,
        since=since,
        before=before,
        parent=parent,
        tags=tags,
        runs=None if runs is None else tuple(runs),
    ).checked()
    arguments.flag("archived", archived)
    limit = listing.check_limit(limit)
    after = None if cursor is None else listing.decode_cursor(cursor)
    found = await core.read(
        core.statements.runs.list(
            filters.listing(), archived=archived, cursor=after, limit=limit + 1
        )
    )
    return listing.page(found, limit)


async def steps(core: Core, ref: str) -> list[Step]:
    """The step checkpoints of a run (live or archived), in position order."""
    run = await core.find(ref)
    if run.archived:
        return await core.read(core.statements.steps.list_archived(run.id))
    return await core.read(core.statements.steps.list(run.id))


async def step_logs(core: Core, ref: str, step: str | None = None) -> list[dict[str, Any]]:
    """The log records each step attempt of a run emitted (of step ``step`` only, if given).

    One dict per attempt that logged something, by step position then
    attempt: ``position``, ``attempt``, ``name``, ``worker_id``, ``status``
    (how the attempt ended), ``records`` (``at``, ``level``, ``logger``,
    ``message`` each), ``truncated`` (records were dropped past the bound) and
    ``created_at``. An archived run has none (they are not archived).
    """
    run = await core.find(ref)
    if run.archived:
        return []
    return await core.read(core.statements.steplogs.list(run.id, step))


async def history(core: Core, ref: str) -> list[HistoryEvent]:
    """The append-only history of a run (live or archived), oldest entry first.

    Each entry is a ``HistoryEvent`` (run_started, step_completed,
    ...); not to be confused with the values a run publishes with
    ``ctx.set_event`` (see [`events`][perdure.App.events]).
    """
    run = await core.find(ref)
    if run.archived:
        return await core.read(core.statements.history.list_archived(run.id))
    return await core.read(core.statements.history.list(run.id))


async def workers(core: Core) -> list[WorkerInfo]:
    """Known workers, most recently seen first."""
    return await core.read(core.statements.workers.list())


async def workflows(core: Core) -> list[WorkflowInfo]:
    """Registered workflow versions with run counts by status and the live workers
    that serve each (a version no live worker has gets none of its runs claimed),
    and how many of its unfinished runs no live worker serves (``stranded``)."""
    found = await core.read(core.statements.workflows.list())
    waiting = {
        (s.workflow, s.version): s.runs
        for s in await core.read(core.statements.workflows.stranded())
    }
    return [replace(w, stranded=waiting.get((w.name, w.version), 0)) for w in found]


async def count_runs(
    core: Core, filter: RunFilter | None = None, *, cap: int = 10_000
) -> dict[str, int]:
    """How many runs ``filter`` matches in each status (its status is ignored).

    The cost is bounded however many runs are finished. With only a time
    range (or nothing), each status is counted up to ``cap``: a count equal
    to ``cap`` means "cap or more". With a narrowing criterion (workflow,
    version, queue, worker, key prefix, parent, tags or runs), the counts
    are those of the newest ``cap`` matching runs (so they add up to at
    most ``cap``).
    """
    if filter is not None and not isinstance(filter, RunFilter):
        raise ConfigurationError(f"filter must be a perdure.RunFilter, not {filter!r}")
    checked = (filter or RunFilter()).checked()
    arguments.integer("cap", cap, minimum=1, maximum=10_000_000)
    counts = dict.fromkeys((s.value for s in RunStatus), 0)
    if checked.narrowing:
        stmt = core.statements.runs.count_recent(checked.params(), cap)
    else:
        stmt = core.statements.runs.count_by_status(checked.params(), list(counts), cap)
    found: dict[str, int] = await core.read(stmt)
    counts.update(found)
    return counts


async def run_activity(
    core: Core, *, since: datetime, bucket_seconds: float
) -> list[dict[str, Any]]:
    """Runs created since ``since``, counted per time bucket and current status.

    Rows of ``bucket`` (the bucket's start), ``status`` and ``n``, oldest
    bucket first; buckets without runs are left out.
    """
    if not isinstance(since, datetime):
        raise ConfigurationError(f"since must be a datetime, not {since!r}")
    seconds = arguments.seconds("bucket_seconds", bucket_seconds, positive=True)
    return await core.read(core.statements.runs.activity(since, seconds))


async def registered_workflows(core: Core) -> list[WorkflowInfo]:
    """Registered workflow versions with their definitions, without run counts (cheap)."""
    return await core.read(core.statements.workflows.list_registered())


async def held_tasks(core: Core, limit: int = 1000) -> list[dict[str, Any]]:
    """The tasks workers hold now: worker_id, run_id, kind, workflow, step_name, claimed_at."""
    arguments.integer("limit", limit, minimum=1, maximum=100_000)
    return await core.read(core.statements.tasks.list_claimed(limit))


async def events(core: Core, ref: str) -> list[dict[str, Any]]:
    """The events run ``ref`` published with ``ctx.set_event``: key, value, position, updated_at.

    Events are the values a run publishes for the outside to read
    (``get_event``); what happened to the run is its [`history`][perdure.App.history].
    """
    run = await core.find(ref)
    return await core.read(core.statements.events.list(run.id))
