"""Parallel steps in a function workflow: ``ctx.gather`` and ``ctx.map``.

A gather takes one position per parallel step plus one for its outcome marker. The
first time the run reaches it, every parallel step without a checkpoint becomes a
'pending' step row with a task of kind 'step', and the run's own task parks
without holding a slot. Any worker may claim a parallel step's task: it replays the
workflow up to the gather (every earlier step is memoized), executes that one
parallel step, and writes its checkpoint, deletes its task and, when it was the last
parallel step (or it failed: gathers fail fast), wakes the run, in one transaction.
The run's task then replays the gather from the checkpoints and moves on.

Fail-fast policy: without ``return_exceptions``, the gather raises the first
failed parallel step's StepFailed (in argument order among the parallel steps that had
failed when the run woke) as soon as one fails; parallel steps still running
finish and are recorded, and are dropped if the run ends first. The choice is
recorded in the marker, so every replay raises the same error. With
``return_exceptions=True`` the gather waits for every parallel step and returns
StepFailed instances in place of failed parallel steps' results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar, overload

from perdure.engine import typed
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import Suspend
from perdure.engine.executor import Execution, StepTaskDone
from perdure.engine.retry import RetryPolicy
from perdure.engine.waits import FOREVER_SECONDS
from perdure.errors import ConfigurationError, StepFailed
from perdure.steps import StepCall
from perdure.store.store import execute_async
from perdure.types import Step, StepStatus

T = TypeVar("T")
_FINAL = (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED)


class MappedSteps(Sequence[StepCall[Any]]):
    """The steps of ``ctx.map``: ``name[i]`` runs ``fn(items[i])``, built when read.

    A worker executing one of them reads only that one, so a map over n
    items costs each of its n tasks O(1) calls, not n.
    """

    def __init__(
        self,
        execution: Execution,
        name: str,
        fn: Callable[..., Any],
        items: Sequence[Any],
        retry: RetryPolicy | None,
        timeout: float | None,
    ) -> None:
        """Describe one step per item of ``items``."""
        self.execution, self.name, self.fn = execution, name, fn
        self.items, self.retry, self.timeout = items, retry, timeout

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> StepCall[Any]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[StepCall[Any]]: ...

    def __getitem__(self, index: int | slice) -> StepCall[Any] | Sequence[StepCall[Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return StepCall(
            self.execution,
            f"{self.name}[{index}]",
            self.fn,
            (self.items[index],),
            {},
            self.retry,
            self.timeout,
        )


def _check(ex: Execution, call: object) -> None:
    if not isinstance(call, StepCall) or call.execution is not ex:
        raise ConfigurationError(
            "gather takes steps of this run: ctx.step(...) or ctx.branch(...) calls"
        )


async def gather(
    ex: Execution, calls: Sequence[StepCall[Any]], *, return_exceptions: bool = False
) -> list[Any]:
    """Run ``calls`` as parallel steps; their results in order (see the module doc)."""
    await ex.gate()
    if not calls:
        return []
    if ex.step_task_position is not None:
        # Executing one parallel step: if it belongs to this gather, run it
        # alone. Only the steps before the gather and this step's own
        # checkpoint were read (step_list_before), so siblings are not looked at.
        index = ex.step_task_position - ex.position
        if 0 <= index < len(calls):
            call = calls[index]
            _check(ex, call)
            ex.position = ex.step_task_position
            position, recorded = ex.advance(call.name, "step")
            await _run_step_task(ex, call, position, recorded)
    for call in calls:
        _check(ex, call)
    gather_start = ex.position
    reserved = [ex.advance(call.name, "step") for call in calls]
    marker_position, marker = ex.advance(f"gather:{len(calls)}", "gather")
    chosen = dict(reserved).get(int(marker.output["failed"])) if marker is not None else None
    if chosen is not None and chosen.status in _FINAL:
        # Failed fast earlier: raise the failure that was chosen then.
        ex.replayed(chosen)
    records = [recorded for _, recorded in reserved]
    pending = [
        (position, call.name)
        for call, (position, recorded) in zip(calls, reserved, strict=True)
        if recorded is None or recorded.status not in _FINAL
    ]
    failures = [r for r in records if r is not None and r.status in _FINAL[1:]]
    if failures and not return_exceptions:
        if pending and ex.step_task_position is None and not ex.replay_only:
            first = failures[0]
            attempt = Attempt(
                marker_position,
                f"gather:{len(calls)}",
                "gather",
                1,
                ex.task.db_now or first.started_at,
            )
            await ex.checkpoint(attempt, "completed", json.dumps({"failed": first.position}), None)
        ex.replayed(failures[0])
    if not pending:
        return [
            _outcome(ex, r, call) for call, r in zip(calls, records, strict=True) if r is not None
        ]
    ex.end_of_history()
    await _park(ex, pending, gather_start)


def _outcome(ex: Execution, recorded: Step, call: StepCall[Any]) -> Any:
    """A parallel step's result: its output (rebuilt as its declared type) or its failure."""
    if recorded.status == StepStatus.COMPLETED:
        return typed.return_hint(call.fn).rebuild(recorded.output, f"the output of {call.name!r}")
    return ex.recorded_failure(recorded)


async def _park(ex: Execution, pending: list[tuple[int, str]], gather_start: int) -> NoReturn:
    statements = ex.env.store.statements
    waiting_for = {"steps": len(pending), "first": pending[0][1]}
    async with ex.env.store.transaction() as conn:
        # The run's row lock orders this park against the parallel steps'
        # completions: a parallel step finishing after it sees the parked task.
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        parked = await execute_async(
            conn,
            statements.steps.fanout(
                ex.task.fence,
                positions=[p for p, _ in pending],
                names=[n for _, n in pending],
                seconds=FOREVER_SECONDS,
                waiting_for_json=json.dumps(waiting_for),
                gather_start=gather_start,
            ),
        )
    if not parked.leased:
        ex.lose_lease()
    ex.env.emit(
        "steps_scheduled", run_id=ex.task.run_id, steps=parked.spawned, waiting=len(pending)
    )
    raise Suspend()


async def _run_step_task(
    ex: Execution, call: StepCall[Any], position: int, recorded: Step | None
) -> None:
    """Execute the parallel step this task is for, then stop the workflow (StepTaskDone)."""
    if recorded is not None and recorded.status in _FINAL:
        # Already recorded (a duplicate task): end the task, wake the run if last.
        await finish_unreachable(ex, position, call.name, recorded=recorded)
    try:
        await call.run((position, recorded))
    except StepFailed:
        pass  # recorded as the parallel step's failure; the run decides what it means
    raise StepTaskDone()


async def finish_unreachable(
    ex: Execution, position: int, name: str, *, recorded: Step | None = None
) -> None:
    """End a parallel step's task without running it; fail the step if it has no record.

    Used when the workflow, replayed for this task, does not reach the step
    (its code changed), and for a duplicate task of a step recorded already.
    """
    status, output, error = "failed", None, None
    if recorded is not None:
        status = "completed" if recorded.status == StepStatus.COMPLETED else "failed"
        output = json.dumps(recorded.output)
    else:
        error = json.dumps(
            {
                "type": "NonDeterminismError",
                "message": f"replaying run {ex.task.run_id} did not reach parallel step "
                f"{name!r} at position {position}: the workflow's code no longer asks for it",
            }
        )
    statements = ex.env.store.statements
    async with ex.env.store.transaction() as conn:
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        result = await execute_async(
            conn,
            statements.steps.complete_parallel(
                ex.task.fence,
                position=position,
                name=name,
                kind="step",
                status=status,
                attempts=recorded.attempts if recorded else 1,
                output_json=output,
                error_json=error,
                started_at=statements.clock.wall_now(),
                event=f"step_{status}",
                wake=True,
            ),
        )
    if not result.leased:
        ex.lose_lease()
    raise StepTaskDone()
