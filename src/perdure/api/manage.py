"""Managing runs: cancel, retry, restart, fork, and cancel or retry runs in bulk.

These are the operations an operator (the CLI, the dashboard) runs on runs
that already exist:

* ``app.cancel(run)``: stop an unfinished run; ``app.retry(run)``: queue a
  failed or cancelled run again, resuming at the step that failed.
* ``app.restart(run)``: a new run of the same workflow version with the same
  input, executed from the beginning, that names the original in
  ``restarted_from``.
* ``app.fork(run, from_step=N)``: the same, but the original's checkpoints
  before step N are copied, so those steps are replayed, not executed again
  (see ``perdure.engine.lineage`` for what "before" means).
* ``app.cancel_runs(filter)`` / ``app.retry_runs(filter)``: every run the
  filter matches, in bounded batches; ``dry_run=True`` lists them first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from perdure.api.core import Core
from perdure.api.filters import RunFilter
from perdure.api.handle import RunHandle
from perdure.engine import arguments, lineage
from perdure.errors import (
    ConfigurationError,
    InvalidRunState,
    RunKeyConflict,
    RunNotFound,
    UnknownWorkflow,
)
from perdure.ids import new_run_id
from perdure.types import BulkResult, Run, RunRef, RunStatus

#: The statuses bulk cancel applies to: every run that has not finished.
CANCELLABLE = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING,
    RunStatus.PAUSED,
    RunStatus.COMPENSATING,
)
#: The statuses retry applies to.
RETRYABLE = (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.COMPENSATION_FAILED)
#: The default and the largest number of runs one bulk statement handles.
DEFAULT_BATCH = 500
MAX_BATCH = 10_000


async def cancel(core: Core, ref: str, reason: str = "cancelled by request") -> Run:
    """Cancel an unfinished run; cancelling a cancelled run again changes nothing."""
    check_reason(reason)
    run = await core.find(ref)
    found = await core.run(core.statements.runs.cancel([run.id], reason[:1000]))
    if not found:
        raise RunNotFound(ref)
    row = found[0]
    previous = RunStatus(row["previous_status"])
    if not row["changed"] and previous != RunStatus.CANCELLED:
        raise InvalidRunState(run.id, previous.value, "cancel")
    return await core.find(run.id)


async def retry(core: Core, ref: str) -> RunHandle:
    """Queue a failed or cancelled run again, resuming at the step that failed."""
    run = await core.find(ref)
    if run.archived:
        # An archived run is read-only: its rows left the live tables.
        raise InvalidRunState(run.id, "archived", "retry")
    if not await core.run(core.statements.runs.retry([run.id])):
        raise InvalidRunState(run.id, run.status.value, "retry")
    return RunHandle(core.owner, run.id, created=False)


async def restart(core: Core, ref: str, *, key: str | None = None, priority: int = 0) -> RunHandle:
    """Start run ``ref``'s workflow version again with its input, as a new run.

    Nothing of the original is reused: every step executes again. The new
    run names the original in ``restarted_from`` and the original's history
    records ``run_restarted``. The original is left as it is, whatever its
    status. ``key`` makes the call idempotent (a second restart with the
    same key returns the first one's run).
    """
    return await _copy(core, ref, key, priority, None)


async def fork(
    core: Core, ref: str, *, from_step: str | int, key: str | None = None, priority: int = 0
) -> RunHandle:
    """Start a new run of run ``ref``'s workflow version that reuses its steps before one.

    The new run gets the original's input and a copy of its checkpoints
    before ``from_step`` (a step name, or a function workflow's position),
    so those steps return their recorded outputs instead of executing;
    ``from_step`` and what follows execute again. For a function workflow
    "before" means at a lower position; for a graph workflow, not
    downstream of ``from_step``. The new run names the original in
    ``forked_from`` (and the step in ``fork_step``). UnknownStep if the
    original has no such step. ``key`` makes the call idempotent.
    """
    return await _copy(core, ref, key, priority, _fork_point(from_step))


async def _copy(
    core: Core, ref: str, key: str | None, priority: int, from_step: str | int | None
) -> RunHandle:
    key = arguments.optional_text("key", key, max_length=arguments.MAX_KEY_LENGTH)
    priority = arguments.integer(
        "priority", priority, minimum=-arguments.INT32_MAX, maximum=arguments.INT32_MAX
    )
    run = await core.find(ref)
    fork_step: str | None = None
    positions: list[int] = []
    if from_step is not None:
        fork_step, positions = await _fork_plan(core, run, from_step)
    row = await core.run(
        core.statements.runs.copy(
            source_id=run.id,
            run_id=new_run_id(),
            key=key,
            priority=priority,
            fork_step=fork_step,
            positions=positions,
        )
    )
    if row is None:
        raise RunNotFound(ref)
    if row["workflow"] != run.workflow:
        raise RunKeyConflict(key or "", row["workflow"], run.workflow)
    return RunHandle(core.owner, str(row["id"]), created=bool(row["created"]))


async def _fork_plan(core: Core, run: Run, from_step: str | int) -> tuple[str, list[int]]:
    """The fork point's name and the positions to copy (see engine.lineage)."""
    steps = await core.run(core.statements.steps.list(run.id))
    local = core.registry.get(run.workflow, run.version)
    if local is not None:
        local.validate()
        kind, definition = local.kind, local.definition()
    else:
        row = await core.run(core.statements.workflows.lookup(run.workflow, run.version))
        if row is None:
            raise UnknownWorkflow(run.workflow, run.version)
        kind, definition = row["kind"], row["definition"] or {}
    if kind == "graph":
        return lineage.graph_fork(run.id, definition, steps, from_step)
    finished = []
    for child in lineage.child_runs(steps):
        found = await core.run(core.statements.runs.get(child))
        if found is not None and found.status.is_final:
            finished.append(child)
    return lineage.function_fork(run.id, steps, from_step, finished)


async def cancel_runs(
    core: Core,
    filter: RunFilter,
    *,
    dry_run: bool = False,
    reason: str = "cancelled by request",
    batch_size: int = DEFAULT_BATCH,
    limit: int | None = None,
) -> BulkResult:
    """Cancel every unfinished run that ``filter`` matches, ``batch_size`` at a time.

    With ``dry_run=True`` nothing changes: the result lists the runs that
    would be cancelled now. Otherwise each batch is one short transaction
    (the runs' row locks, taken in id order, are held only for it), and
    the result lists the runs cancelled, and in ``skipped`` those that had
    moved on (finished, say) by the time their batch came. ``limit`` caps
    how many runs are visited, newest first.
    """
    check_reason(reason)

    async def act(ids: list[str], statuses: list[str]) -> list[str]:
        found = await core.run(core.statements.runs.cancel(ids, reason[:1000], statuses))
        return [str(row["id"]) for row in found if row["changed"]]

    return await _bulk(core, "cancel", filter, dry_run, batch_size, limit, act)


async def retry_runs(
    core: Core,
    filter: RunFilter,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    limit: int | None = None,
) -> BulkResult:
    """Retry every failed, cancelled or compensation_failed run ``filter`` matches.

    Each run resumes at the step that failed, as with [`retry`][perdure.App.retry].
    ``dry_run``, ``batch_size``, ``limit`` and the result are as for
    [`cancel_runs`][perdure.App.cancel_runs].
    """

    async def act(ids: list[str], statuses: list[str]) -> list[str]:
        return await core.run(core.statements.runs.retry(ids, statuses))

    return await _bulk(core, "retry", filter, dry_run, batch_size, limit, act)


async def _bulk(
    core: Core,
    operation: str,
    filter: RunFilter,
    dry_run: bool,
    batch_size: int,
    limit: int | None,
    act: Callable[[list[str], list[str]], Awaitable[list[str]]],
) -> BulkResult:
    if not isinstance(filter, RunFilter):
        raise ConfigurationError(f"filter must be a perdure.RunFilter, not {filter!r}")
    checked = filter.checked()
    arguments.flag("dry_run", dry_run)
    arguments.integer("batch_size", batch_size, minimum=1, maximum=MAX_BATCH)
    if limit is not None:
        arguments.integer("limit", limit, minimum=1)
    statuses = checked.statuses(CANCELLABLE if operation == "cancel" else RETRYABLE)
    done: list[RunRef] = []
    skipped: list[RunRef] = []
    after: RunRef | None = None
    while statuses:
        size = batch_size if limit is None else min(batch_size, limit - len(done + skipped))
        page = await core.run(
            core.statements.runs.select(
                statuses=statuses,
                filters=checked.params(),
                after=after,
                limit=size,
            )
        )
        if not page:
            break
        after = page[-1]
        acted = set() if dry_run else set(await act([r.id for r in page], statuses))
        done += [r for r in page if dry_run or r.id in acted]
        skipped += [r for r in page if not dry_run and r.id not in acted]
        if len(page) < size or (limit is not None and len(done + skipped) >= limit):
            break
    return BulkResult(operation, dry_run, done, skipped)


def _fork_point(from_step: object) -> str | int:
    """``from_step`` if it is a step name or a position (ConfigurationError if not)."""
    if isinstance(from_step, int) and not isinstance(from_step, bool):
        return arguments.integer("from_step", from_step, minimum=0)
    return arguments.label("from_step", from_step)


def check_reason(reason: object) -> str:
    """A cancellation reason: a string PostgreSQL can store (ConfigurationError if not)."""
    if not isinstance(reason, str) or not arguments.storable(reason):
        raise ConfigurationError(
            f"reason must be a string without NUL characters or lone surrogates, not {reason!r}"
        )
    return reason
