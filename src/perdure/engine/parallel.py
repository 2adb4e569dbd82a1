"""Step tasks in a function workflow: ``ctx.gather`` and ``ctx.map``.

A gather takes one position per step plus one for its outcome marker. The
first time the run reaches it, every one of its steps without a checkpoint becomes a
'pending' step row with its own task, a step task, and the run's own task parks
without holding a slot. Any worker may claim a step task: it replays the
workflow up to the gather (every earlier step is memoized), executes that one
step task, and writes its checkpoint, deletes its task and, when it was the last
step task (or it failed: gathers fail fast), wakes the run, in one transaction.
The run's task then replays the gather from the checkpoints and moves on.

The worker whose run reaches a gather does not leave the step tasks to
the claim loops alone: it holds the workflow's steps in memory, so before it
parks the run it claims them itself (the run's task still claimed, in its one
slot), in batches in position order (step_task_claim), runs each batch at
once and writes the batch's completions in one statement
(step_task_complete), without replaying the workflow for each step. Then
it parks the run as above; the run is due at once when nothing is left. Every
claimed step is a task leased like any other: other workers claim the ones it
has not reached (SKIP LOCKED) once a head start has passed (see
HEAD_START_SECONDS: claim loops would replay the workflow for steps this
worker is about to run), and if it dies only its batch in flight runs
again, by whoever claims those tasks after their lease lapses. A step that
fails, retries or snoozes is recorded by the same path as any parallel
step's. So a map over n items costs O(1) per item, not a replay each.

Fail-fast policy: without ``return_exceptions``, the gather raises the first
failed step task's StepFailed (in argument order among the step tasks that had
failed when the run woke) as soon as one fails; step tasks still running
finish and are recorded, and are dropped if the run ends first. The choice is
recorded in the marker, so every replay raises the same error. With
``return_exceptions=True`` the gather waits for every step task and returns
StepFailed instances in place of failed step tasks' results.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from perdure.engine.checkpoint import Attempt
from perdure.engine.control import StaleHistory, Suspend, Unwind
from perdure.engine.cursor import ReplayCursor
from perdure.engine.environment import ExecutionEnv
from perdure.engine.executor import Execution, StepTaskDone
from perdure.engine.results import StepResults, outcome
from perdure.engine.retry import RetryPolicy
from perdure.engine.waits import FOREVER_SECONDS
from perdure.engine.writer import FencedWriter
from perdure.errors import ConfigurationError, StepFailed
from perdure.steps import StepCall
from perdure.store.codec import Offloaded
from perdure.store.rows import ClaimedStepTask, ClaimedTask, StepTask, StepTaskCompletion
from perdure.store.store import execute_async
from perdure.store.writes import Checkpoint
from perdure.types import Step, StepStatus

log = logging.getLogger("perdure.parallel")
T = TypeVar("T")
#: How many of a gather's step tasks the parking worker claims and runs at once.
GATHER_BATCH = 128
#: How long the worker that reached a gather has its step tasks to
#: itself before claim loops (other workers', its own) take them too: about
#: the time it needs to run them alone when they are quick (HEAD_START_RATE
#: a second), at least HEAD_START_SECONDS, at most HEAD_START_MAX_SECONDS.
HEAD_START_SECONDS = 0.5
HEAD_START_RATE = 2000.0
HEAD_START_MAX_SECONDS = 120.0
#: A worker with fewer slots than this hands the step tasks it cannot run
#: at once to the fleet without a head start (see share_the_rest).
FEW_SLOTS = 8
#: Fewer at once when the step is a plain ``def``: they share the worker's threads.
GATHER_BATCH_THREADS = 8
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
) -> Sequence[Any]:
    """Run ``calls`` as step tasks; their results in order (see the module doc)."""
    await ex.gate()
    if not calls:
        return []
    if ex.step_task_position is not None:
        # Executing one step task: if it belongs to this gather, run it
        # alone. Only the steps before the gather and this step's own
        # checkpoint were read (step_list_claimed_now), so siblings are not looked at.
        index = ex.step_task_position - ex.cursor.position
        if 0 <= index < len(calls):
            call = calls[index]
            _check(ex, call)
            ex.cursor.jump(ex.step_task_position)
            position, recorded = ex.advance(call.name, "step")
            await _run_step_task(ex, call, position, recorded)
    for call in calls:
        _check(ex, call)
    gather_start = ex.cursor.position
    reserved = [ex.advance(call.name, "step", lazy=True) for call in calls]
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
        offloads = ex.env.store.statements.payloads.offload is not None
        if offloads and any(type(r.output) is Offloaded for r in records if r is not None):
            return StepResults(ex, calls, [r for r in records if r is not None])
        return [
            outcome(ex, r, call) for call, r in zip(calls, records, strict=True) if r is not None
        ]
    ex.end_of_history()
    await _fanout(ex, pending, gather_start, park=False)
    failed = await run_here(
        ex.env, ex.task, _step_task_runner(ex, calls, gather_start, not return_exceptions)
    )
    # Failed fast: due at once, to raise the failure; else when the last
    # step still running elsewhere completes.
    await _fanout(ex, pending, gather_start, park=True, seconds=0.0 if failed else FOREVER_SECONDS)
    raise Suspend()


def batch_size(env: ExecutionEnv, most: int) -> int:
    """How many steps one batch claims: ``most``, at most the worker's concurrency."""
    return min(most, env.concurrency)


async def share_the_rest(env: ExecutionEnv, task: ClaimedTask, claimed: int, limit: int) -> None:
    """When a batch took all it could (``claimed == limit``), more steps may wait
    out their head start, as ``task``'s worker cannot run them all at once. A
    worker with fewer than FEW_SLOTS slots (a single-slot worker of heavy steps)
    lets the fleet claim them now: it would reach them only after its batch.
    Another wakes the other workers, which set their timers for them and join
    after the head start."""
    if claimed != limit:
        return
    statements = env.store.statements
    if env.concurrency < FEW_SLOTS:
        await env.store.execute(statements.steps.release(task.run_id))
    else:
        await env.store.execute(statements.queues.wake(task.fence.worker_id))


def head_start(steps: int) -> float:
    """How long the worker that made ``steps`` steps claimable has them to itself."""
    return min(HEAD_START_SECONDS + steps / HEAD_START_RATE, HEAD_START_MAX_SECONDS)


async def _fanout(
    ex: Execution,
    pending: list[tuple[int, str]],
    gather_start: int,
    *,
    park: bool,
    seconds: float = FOREVER_SECONDS,
) -> None:
    """Spawn the step tasks of the pending steps (those without a task yet) and, if ``park``,
    park the run until they are done."""
    statements = ex.env.store.statements
    waiting_for = {"steps": len(pending), "first": pending[0][1]}
    async with ex.env.store.transaction() as conn:
        # The run's row lock orders this park against the step tasks'
        # completions: a step task finishing after it sees the parked task.
        status = await execute_async(conn, statements.runs.lock(ex.task.run_id))
        if status == "cancelled":
            # Cancelled while this worker ran the steps: stop (the task is
            # settled like any cancelled run's), do not park.
            ex.note_status(status)
            ex.check_alive()
        parked = await execute_async(
            conn,
            statements.steps.fanout(
                ex.task.fence,
                positions=[p for p, _ in pending],
                names=[n for _, n in pending],
                seconds=seconds,
                waiting_for_json=json.dumps(waiting_for),
                gather_start=gather_start,
                head_start=head_start(len(pending)),
                park=park,
                lease_seconds=ex.env.lease_seconds,
            ),
        )
    if not parked.leased:
        ex.lose_lease()
    if not park:
        ex.env.observer.steps_scheduled(ex.task, parked.spawned, len(pending))


#: Runs one claimed step of a local batch: its completion, to write with the
#: batch's; "failed" if it failed for good (written); None if it was written
#: otherwise (retrying, snoozed, or with test faults installed) or its lease was lost.
RunClaimed = Callable[[ClaimedStepTask], Awaitable[StepTaskCompletion | str | None]]


@dataclass(frozen=True)
class LocalSteps:
    """Which of a run's steps this worker claims and runs itself, and how."""

    #: The gather whose step tasks these are; None for a graph's steps.
    gather_start: int | None
    #: The positions claimed: ``first`` up to ``before``.
    first: int
    before: int
    #: How many steps one batch claims.
    limit: int
    #: Made once per batch, before its steps start (a graph reads their rows).
    runner: Callable[[list[ClaimedStepTask]], Awaitable[RunClaimed]]
    #: Stop at the first step that fails for good (a gather without return_exceptions).
    fail_fast: bool = False
    #: Called in the transaction of each batch's completions (a graph decides
    #: there what runs next).
    then: Callable[[Any], Awaitable[None]] | None = None
    #: Whether a gather's claims move on past each batch (a graph's decisions
    #: make new steps ready anywhere: each batch claims from the start).
    moves_on: bool = True


async def run_here(env: ExecutionEnv, task: ClaimedTask, local: LocalSteps) -> bool:
    """Claim ``local``'s steps of ``task``'s run on this worker and run them, a batch
    at a time, each batch's completions written in one transaction; whether one
    failed for good while ``local.fail_fast`` (then the rest of its batch finishes
    in the background and no further batch is claimed).

    One loop for a gather's step tasks and a graph's ready steps. Stops
    when none is left to claim (the rest are done or claimed elsewhere). A
    database error ends it quietly: the steps it claimed lapse and are claimed
    again, as after a crash.
    """
    statements, worker_id = env.store.statements, task.fence.worker_id
    after = local.first
    try:
        while True:
            claimed = await env.unheld.claim_step_tasks(
                env.store,
                task.run_id,
                statements.steps.claim_step_tasks(
                    task.run_id,
                    worker_id,
                    gather_start=local.gather_start,
                    after=after,
                    before=local.before,
                    limit=local.limit,
                    lease_seconds=env.lease_seconds,
                ),
            )
            if not claimed:
                if after == local.first:
                    return False
                after = local.first  # once more from the start: steps skipped while locked
                continue
            if after == local.first:
                await share_the_rest(env, task, len(claimed), local.limit)
            if local.moves_on:
                after = claimed[-1].position + 1
            batch = _Batch(env, task, claimed, await local.runner(claimed), local.then)
            try:
                failed = await batch.run(local.fail_fast)
            except BaseException:
                # However the batch ends (a lost database included), its lease
                # keeper stops: else the steps it claimed would never lapse.
                await batch.cancel()
                raise
            if batch.running:
                # Failed fast: the run goes on now; the rest of the batch
                # finishes and is recorded, as step tasks still running
                # do. The worker waits for it (then cancels it) when it stops.
                rest = asyncio.create_task(batch.finish())
                env.background.add(rest)
                rest.add_done_callback(env.background.discard)
                return True
            batch.leases.cancel()
            if failed:
                return True
    except Exception:
        log.warning("run %s: running its steps here stopped", task.run_id, exc_info=True)
        return False


def _step_task_runner(
    ex: Execution, calls: Sequence[StepCall[Any]], gather_start: int, fail_fast: bool
) -> LocalSteps:
    """A gather's step tasks, run here by the execution that reached it."""
    threaded = any(not inspect.iscoroutinefunction(calls[i].fn) for i in range(min(len(calls), 8)))

    async def runner(claimed: list[ClaimedStepTask]) -> RunClaimed:
        return lambda g: _run_claimed(ex, calls, gather_start, g)

    return LocalSteps(
        gather_start,
        gather_start,
        gather_start + len(calls),
        batch_size(ex.env, GATHER_BATCH_THREADS if threaded else GATHER_BATCH),
        runner,
        fail_fast=fail_fast,
    )


class _Batch:
    """One batch of claimed steps running at once, with their leases kept."""

    def __init__(
        self,
        env: ExecutionEnv,
        task: ClaimedTask,
        claimed: list[ClaimedStepTask],
        run: RunClaimed,
        then: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        """Start ``run`` for each claimed step, and the task that extends their leases."""
        self.env, self.task, self.then = env, task, then
        self.running: set[asyncio.Future[StepTaskCompletion | str | None]] = {
            asyncio.ensure_future(run(g)) for g in claimed
        }
        self.leases = keep_leases(env, task.fence.worker_id, [g.fence.task_id for g in claimed])

    async def run(self, fail_fast: bool) -> bool:
        """Wait for the steps and write the completions of those done; whether one
        failed for good while ``fail_fast`` (then the others may still be running)."""
        completed: list[StepTaskCompletion] = []
        failed = False
        while self.running and not failed:
            done, self.running = await asyncio.wait(
                self.running, return_when=asyncio.FIRST_COMPLETED
            )
            for job in done:
                outcome = job.result()
                if isinstance(outcome, StepTaskCompletion):
                    completed.append(outcome)
                failed = failed or (outcome == "failed" and fail_fast)
        await complete_batch(self.env, self.task, completed, self.then)
        return failed

    async def finish(self) -> None:
        """Wait for the rest of the batch and record its completions (in the
        background); cancelled, it stops its steps and writes nothing more."""
        try:
            await self.run(fail_fast=False)
        except asyncio.CancelledError:
            await self.cancel()
            raise
        except Exception:
            log.warning("run %s: finishing its step tasks stopped", self.task.run_id, exc_info=True)
        finally:
            self.leases.cancel()

    async def cancel(self) -> None:
        """Cancel the steps still running and wait until they have stopped (their
        transactions ended): their leases lapse and other workers run them again."""
        self.leases.cancel()
        for job in self.running:
            job.cancel()
        await asyncio.gather(*self.running, self.leases, return_exceptions=True)


async def wind_down(env: ExecutionEnv, seconds: float) -> None:
    """Let the batches still running in the background finish for up to
    ``seconds``, then cancel the rest and wait until they have stopped, so
    that none is left holding a transaction when the worker stops."""
    if not env.background:
        return
    _, pending = await asyncio.wait(set(env.background), timeout=max(seconds, 0.0))
    for rest in pending:
        rest.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def complete_batch(
    env: ExecutionEnv,
    task: ClaimedTask,
    completed: list[StepTaskCompletion],
    then: Callable[[Any], Awaitable[None]] | None = None,
) -> None:
    """Write a batch's completions in one statement, under the run's row lock, and
    call ``then(conn)`` in the same transaction (a graph decides what runs next)."""
    if not completed:
        return
    run_id, statements = task.run_id, env.store.statements
    async with env.store.transaction() as conn:
        await execute_async(conn, statements.runs.lock(run_id))
        await execute_async(
            conn, statements.steps.complete_step_tasks(run_id, task.fence.worker_id, completed)
        )
        if then is not None:
            await then(conn)
    for c in completed:
        env.observer.step_checkpointed(run_id, c.step.name, "completed")


def keep_leases(env: ExecutionEnv, worker_id: str, task_ids: list[int]) -> asyncio.Task[None]:
    """Extend the leases of a batch's steps while they run (the heartbeat does not
    know them), until the task returned is cancelled."""

    async def keep() -> None:
        while True:
            await asyncio.sleep(env.lease_seconds / 3)
            await env.store.execute(
                env.store.statements.tasks.heartbeat(worker_id, task_ids, env.lease_seconds)
            )

    kept = asyncio.create_task(keep())
    kept.add_done_callback(lambda _: env.unheld.drop(task_ids))
    return kept


def held_completion(ex: Execution, claimed: ClaimedStepTask) -> StepTaskCompletion | None:
    """The completion ``ex`` held back for its batch, if its step completed unwritten.

    A step run in a batch (its writer ``holds``) keeps its completed checkpoint
    so that the batch's completions are written together; a failure, a retry
    or a snooze is written at once, as for any step task.
    """
    held = ex.deferred.take()
    if held is None or held.output_json is None:
        return None
    return StepTaskCompletion(claimed, held.attempts, held.output_json, held.started_at)


async def _run_claimed(
    ex: Execution, calls: Sequence[StepCall[Any]], gather_start: int, claimed: ClaimedStepTask
) -> StepTaskCompletion | str | None:
    """Run one claimed step task; its completion to write, "failed" if it failed
    for good (written), or None if it was written otherwise (retrying, snoozed,
    or with test faults installed) or its lease was lost."""
    index = claimed.position - gather_start
    if not 0 <= index < len(calls) or calls[index].name != claimed.name:
        return None  # not this gather's step: its lease lapses, the claim loop takes it
    call = calls[index]
    task = StepTask.of(ex.task, claimed, gather_start=gather_start, steps=None)
    position = claimed.position
    cursor = ReplayCursor(task.run_id, ex.spec.name, ex.spec.version)
    writer = FencedWriter(ex.env, claimed.fence, task.run_id, holds=True)
    sub = Execution(task, ex.spec, ex.env, cursor, ex.loop, writer, step_task_position=position)
    step: StepCall[Any] = StepCall(
        sub, call.name, call.fn, call.args, call.kwargs, call.retry, call.timeout
    )
    try:
        await step.run((claimed.position, None))
    except StepFailed:
        return "failed"
    except (Suspend, Unwind, StaleHistory):
        return None
    return held_completion(sub, claimed)


async def _run_step_task(
    ex: Execution, call: StepCall[Any], position: int, recorded: Step | None
) -> None:
    """Execute the step task this task is for, then stop the workflow (StepTaskDone)."""
    if recorded is not None and recorded.status in _FINAL:
        # Already recorded (a duplicate task): end the task, wake the run if last.
        await finish_unreachable(ex, position, call.name, recorded=recorded)
    try:
        await call.run((position, recorded))
    except StepFailed:
        pass  # recorded as the step task's failure; the run decides what it means
    raise StepTaskDone()


async def finish_unreachable(
    ex: Execution, position: int, name: str, *, recorded: Step | None = None
) -> None:
    """End a step task without running it; fail the step if it has no record.

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
                "message": f"replaying run {ex.task.run_id} did not reach step task "
                f"{name!r} at position {position}: the workflow's code no longer asks for it",
            }
        )
    statements = ex.env.store.statements
    async with ex.env.store.transaction() as conn:
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        checkpoint = Checkpoint(
            ex.task.fence,
            position,
            name,
            "step",
            status,
            recorded.attempts if recorded else 1,
            statements.clock.wall_now(),
            output,
            error,
            ends_task=True,
            wake=True,
        )
        result = await execute_async(conn, statements.steps.finish_step_task(checkpoint))
    if not result.leased:
        ex.lose_lease()
    raise StepTaskDone()
