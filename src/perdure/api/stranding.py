"""Runs no live worker serves: find them, and move those that recorded nothing.

A run is pinned to the workflow version that started it, and only a worker
with that version's code claims it. When every worker of a version is gone
(the fleet was upgraded to version 2 while version-1 runs were queued), its
runs wait for ever, silently. ``app.stranded()`` lists such versions, with
how many runs wait and which versions live workers do serve;
``app.move_runs(...)`` moves the waiting runs that have recorded nothing yet
(no step, sleep or wait) to another version, one by one or in bulk. A run
that recorded something stays pinned: replaying its history on other code
could take another path (see docs/versioning.md, "Runs no worker serves").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from perdure.api.core import Core
from perdure.api.filters import RunFilter
from perdure.engine import arguments
from perdure.errors import ConfigurationError, UnknownWorkflow
from perdure.types import MovedRuns, RunRef, RunStatus, SkippedRun, StrandedVersion

#: A worker whose last heartbeat is older than this is not live (as in ``app.workflows``).
STALE_SECONDS = 60.0
#: The statuses of a run that may move: unfinished, and not compensating.
MOVABLE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED)
#: How many runs one move transaction takes.
BATCH = 500


async def stranded(core: Core) -> list[StrandedVersion]:
    """The workflow versions whose unfinished runs no live worker can claim.

    A version is stranded on a queue when no running worker with a heartbeat
    in the last minute has its code and serves that queue. Each entry says
    how many runs wait, on which queues, and which versions of the workflow
    live workers serve (where [`move_runs`][perdure.App.move_runs] can move them).
    """
    return await core.read(core.statements.workflows.stranded(STALE_SECONDS))


async def move_runs(
    core: Core,
    workflow: str,
    from_version: int,
    to_version: int,
    *,
    runs: Sequence[str] | None = None,
    filter: RunFilter | None = None,
    dry_run: bool = False,
    limit: int | None = None,
) -> MovedRuns:
    """Move unfinished runs of ``workflow`` from ``from_version`` to ``to_version``.

    Only runs that have recorded nothing yet (no step, sleep, wait or event)
    and that no worker is executing move: the next worker that serves
    ``to_version`` runs them from the start on that code. The others stay
    pinned and are listed in ``skipped`` with the reason. ``runs`` names the
    runs to move (ids); ``filter`` narrows further (its workflow and version
    are those given here); neither: every matching run. With ``dry_run``
    nothing changes and ``moved`` lists what would move. ``limit`` caps how
    many runs are visited, newest first. ``to_version`` must be registered
    (a worker that has it started once: ``UnknownWorkflow`` if not) and
    differ from ``from_version`` (``ConfigurationError``).
    """
    name = arguments.label("workflow", workflow)
    source = arguments.integer("from_version", from_version, minimum=1)
    target = arguments.integer("to_version", to_version, minimum=1)
    arguments.flag("dry_run", dry_run)
    if limit is not None:
        arguments.integer("limit", limit, minimum=1)
    if source == target:
        raise ConfigurationError(
            f"from_version and to_version are both {source}: runs are already on that version"
        )
    if filter is not None and not isinstance(filter, RunFilter):
        raise ConfigurationError(f"filter must be a perdure.RunFilter, not {filter!r}")
    if isinstance(runs, str) or (runs is not None and not isinstance(runs, Sequence)):
        raise ConfigurationError(f"runs must be a list of run ids, not {runs!r}")
    base = filter or RunFilter()
    if (base.workflow not in (None, name)) or (base.version not in (None, source)):
        raise ConfigurationError(
            "the filter names another workflow or version than the one the runs move from"
        )
    named = tuple(runs) if runs is not None else base.runs
    checked = dataclasses.replace(base, workflow=name, version=source, runs=named).checked()
    if await core.read(core.statements.workflows.lookup(name, target)) is None:
        raise UnknownWorkflow(name, target)
    statuses = checked.statuses(MOVABLE)
    moved: list[str] = []
    skipped: list[SkippedRun] = []
    seen: set[str] = set()
    after: RunRef | None = None
    while statuses:
        size = BATCH if limit is None else min(BATCH, limit - len(seen))
        page = await core.read(
            core.statements.runs.select(
                statuses=statuses, filters=checked.params(), after=after, limit=size
            )
        )
        if not page:
            break
        after = page[-1]
        ids = [r.id for r in page]
        seen.update(ids)
        found = await core.run(
            core.statements.workflows.move_runs(
                workflow=name,
                from_version=source,
                to_version=target,
                ids=ids,
                statuses=statuses,
                dry_run=dry_run,
            )
        )
        judged = {str(row["id"]): row for row in found}
        for run_id in ids:
            row = judged.get(run_id)
            if row is None:
                skipped.append(SkippedRun(run_id, "not movable"))
            elif row["movable"]:
                moved.append(run_id)
            else:
                skipped.append(SkippedRun(run_id, "recorded" if row["recorded"] else "held"))
        if len(page) < size or (limit is not None and len(seen) >= limit):
            break
    for run_id in checked.runs or ():
        if run_id not in seen:
            skipped.append(SkippedRun(run_id, "not movable"))
    return MovedRuns(name, source, target, dry_run, moved, skipped)
