"""Graph workflows: a DAG of steps, each its own claimable task.

Positions are a topological order of the graph's steps (0..n-1); the
compensation of step i is recorded at position n + i. The run's first task
schedules the steps that depend on nothing and ends. From then on every step
completion decides what comes next in its own transaction, under the run's
row lock: its checkpoint, the deletion of its task, and the tasks of every
step whose dependencies are now satisfied (or the 'skipped' rows of those
whose condition says no) commit together, so independent steps run in
parallel on any workers and nothing is scheduled twice. The worker whose
decision made steps ready runs them first itself, a batch at a time (one
transaction per batch, not per step), while other workers claim the rest.

When a step fails for good, steps not started are cancelled, those running
finish, and then the compensations of the completed steps run one at a time
in reverse topological order, each a durable, retried step. The run ends
'compensated', 'compensation_failed', or 'failed' when nothing needed undoing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from perdure.engine import parallel, poison, serialization, typed
from perdure.engine.control import Outcome, Suspend
from perdure.engine.cursor import ReplayCursor
from perdure.engine.environment import ExecutionEnv, WorkflowSpec
from perdure.engine.executor import Execution
from perdure.engine.retry import RetryPolicy
from perdure.engine.stops import STOPS, stopped
from perdure.engine.waits import FOREVER_SECONDS
from perdure.engine.writer import FencedWriter
from perdure.errors import SignalTimeout, StepFailed, WorkflowDefinitionError
from perdure.steps import StepContext
from perdure.store.codec import Offloaded, opened
from perdure.store.rows import ClaimedStepTask, ClaimedTask, RunTask, StepTask, StepTaskCompletion
from perdure.store.store import execute_async
from perdure.types import Step, StepStatus

log = logging.getLogger("perdure.graph")
_DONE = (StepStatus.COMPLETED, StepStatus.SKIPPED)
_FINAL = (*_DONE, StepStatus.FAILED, StepStatus.CANCELLED)


class GraphStepSpec(Protocol):
    """What the engine needs of one graph step (the api layer provides it)."""

    name: str
    position: int
    depends_on: tuple[int, ...]
    fn: Callable[..., Any]
    when: Callable[[Any], Any] | None
    compensate: Callable[..., Any] | None
    retry: RetryPolicy | None
    timeout: float | None
    signal: str | None
    signal_timeout: float | None
    join: str


class GraphSpec(WorkflowSpec[Any], Protocol):
    """What the engine needs of a graph workflow, beyond any workflow's spec."""

    steps: Sequence[GraphStepSpec]

    def step_input(self, step: GraphStepSpec, outputs: dict[int, Any], run_input: Any) -> Any:
        """What ``step`` receives, given the outputs of its completed dependencies."""

    def sinks(self) -> list[GraphStepSpec]:
        """The steps no other step depends on: their outputs are the run's output."""


async def execute(task: ClaimedTask, spec: Any, env: ExecutionEnv) -> Outcome:
    """Execute a task of a graph run: its first task, a step, or a compensation."""
    store, statements = env.store, env.store.statements
    if task.finished:
        await store.execute(statements.tasks.settle(task.fence))
        return Outcome.SETTLED
    if isinstance(task, RunTask):
        async with store.transaction() as conn:
            await execute_async(conn, statements.runs.lock(task.run_id))
            if not await execute_async(conn, statements.tasks.finish(task.fence)):
                env.lease_lost(task)
                return Outcome.LEASE_LOST
            scheduled = await advance(conn, env, spec, task.run_id, task.input, task.fence.task_id)
        if scheduled:
            await _run_batches(task, spec, env)
        return Outcome.SCHEDULED
    decided: list[bool] = []
    outcome = await _execute_step(task, spec, env, decided=decided)
    if outcome == Outcome.STEP_TASK_COMPLETED and any(decided):
        # This completion made steps ready: run them here.
        await _run_batches(task, spec, env)
    return outcome


async def _run_batches(task: ClaimedTask, spec: GraphSpec, env: ExecutionEnv) -> None:
    """Run the steps this task's decision made ready, here, a batch at a time.

    The worker that scheduled them claims them (by the loop that runs a
    gather's steps, engine.parallel.run_here), runs a batch at once and writes
    the batch's checkpoints and the decision of what runs next in one
    transaction, instead of one each. Other workers claim the rest as usual.
    A database error ends it: the steps it claimed lapse and run again.
    """
    store, statements = env.store, env.store.statements

    async def runner(claimed: list[ClaimedStepTask]) -> parallel.RunClaimed:
        # The batch's own rows and those of their dependencies, read once.
        wanted = [p for g in claimed for p in _reads(spec, g.position)]
        listed = await store.execute(statements.steps.list_at(task.run_id, wanted))
        found = {s.position: s for s in listed}

        async def run(g: ClaimedStepTask) -> StepTaskCompletion | None:
            held: list[StepTaskCompletion] = []
            step_task = StepTask.of(task, g, gather_start=None, steps=())
            try:
                await _execute_step(step_task, spec, env, held=(g, held), found=found)
            except Exception:
                # One step's error does not keep the others' completions from
                # the batch: its lease lapses and it runs again.
                log.debug("run %s: graph step %s stopped", task.run_id, g.name, exc_info=True)
            return held[0] if held else None

        return run

    async def decide(conn: Any) -> None:
        await advance(conn, env, spec, task.run_id, task.input, task.fence.task_id)

    limit = parallel.batch_size(env, parallel.GATHER_BATCH)
    # Each batch's decision may make ready steps anywhere: each claims from the start.
    local = parallel.LocalSteps(
        None, 0, len(spec.steps), limit, runner, then=decide, moves_on=False
    )
    await parallel.run_here(env, task, local)


async def _execute_step(
    task: StepTask,
    spec: GraphSpec,
    env: ExecutionEnv,
    held: tuple[ClaimedStepTask, list[StepTaskCompletion]] | None = None,
    decided: list[bool] | None = None,
    found: dict[int, Step] | None = None,
) -> Outcome:
    """Execute one graph step (or compensation). With ``held``, its completion is
    appended to the batch's list instead of being written; ``decided`` is told
    whether the decision after its checkpoint made steps ready; ``found`` holds
    the rows the batch read (at least this step's and its dependencies')."""
    position = task.step_position
    n = len(spec.steps)
    step = spec.steps[position % n]
    if found is None:
        # A claimed step task: the claim read its run's checkpoints.
        found = {s.position: _opened(task.run_id, s) for s in task.steps or ()}
    # Only what this step reads: its own row and its dependencies' (O(1) in
    # the width of the graph, not O(n) for each of n steps).
    rows = {p: found[p] for p in _reads(spec, position) if p in found}
    recorded = rows.get(position)
    if recorded is not None and recorded.status in _FINAL:
        return await _finish_duplicate(task, spec, env)

    async def decide(conn: Any) -> None:
        scheduled = await advance(conn, env, spec, task.run_id, task.input, task.fence.task_id)
        if decided is not None:
            decided.append(scheduled)

    # In a batch, a completed step's checkpoint is held: the batch writes them together.
    writer = FencedWriter(
        env, task.fence, task.run_id, holds=held is not None, on_step_final=decide
    )
    ex = Execution(
        task,
        spec,
        env,
        ReplayCursor(task.run_id, spec.name, spec.version, rows),
        asyncio.get_running_loop(),
        writer,
        step_task_position=position,
    )
    fn: Callable[..., Any]
    if position >= n:
        name, kind, fn = f"compensate:{step.name}", "compensation", _compensation(spec, step)
        value = typed.return_hint(step.fn).rebuild(
            rows[step.position].output, f"the output of step {step.name!r}"
        )
    else:
        outputs = {p: r.output for p, r in rows.items() if r.status == StepStatus.COMPLETED}
        name, kind, fn = step.name, "step", step.fn
        value = spec.step_input(step, outputs, task.input)

    async def body() -> Any:
        signal = step.signal if kind == "step" else None
        payload = await _open_gate(ex, step, signal) if signal is not None else None
        ctx = StepContext(
            task.run_id,
            spec.name,
            name,
            task.fence.attempt,
            payload,
            task.schedule,
            task.scheduled_at,
        )
        return await ex.call(fn, (ctx, value), {})

    try:
        await ex.step(
            name,
            body,
            (),
            {},
            step.retry,
            step.timeout,
            kind=kind,
            reserved=(position, recorded),
            returns=typed.return_hint(fn),
        )
    except StepFailed:
        return Outcome.STEP_TASK_FAILED
    except STOPS as stop:
        return await stopped(ex, stop)
    if held is not None:
        completion = parallel.held_completion(ex, held[0])
        if completion is not None:
            held[1].append(completion)
    return Outcome.STEP_TASK_COMPLETED


def _opened(run_id: str, step: Step) -> Step:
    """``step`` with its output fetched if the claim read it offloaded, unfetched;
    UndecodablePayload if it cannot be read."""
    if type(step.output) is not Offloaded:
        return step
    where = f"the output of step {step.name!r} at position {step.position}"
    return dataclasses.replace(step, output=poison.check(run_id, where, opened(step.output)))


def _reads(spec: GraphSpec, position: int) -> tuple[int, ...]:
    """The positions whose rows executing ``position`` reads: its own, its step's
    (for a compensation) and its step's dependencies'."""
    step = spec.steps[position % len(spec.steps)]
    return (position, step.position, *step.depends_on)


async def _finish_duplicate(task: ClaimedTask, spec: GraphSpec, env: ExecutionEnv) -> Outcome:
    """A second task for a step already recorded: end it, and decide what comes next."""
    statements = env.store.statements
    async with env.store.transaction() as conn:
        await execute_async(conn, statements.runs.lock(task.run_id))
        if not await execute_async(conn, statements.tasks.finish(task.fence)):
            return Outcome.LEASE_LOST
        await advance(conn, env, spec, task.run_id, task.input, task.fence.task_id)
    return Outcome.STEP_TASK_COMPLETED


def _compensation(spec: GraphSpec, step: GraphStepSpec) -> Callable[..., Any]:
    """``step``'s compensation; one that fails if the code no longer has one (a deploy
    removed it while its task waited): the compensation fails, it is not skipped."""
    if step.compensate is not None:
        return step.compensate

    def removed(ctx: StepContext, value: Any) -> None:
        raise WorkflowDefinitionError(
            f"graph {spec.name!r}: step {step.name!r} has no compensation in this code"
        )

    return removed


async def _open_gate(ex: Execution, step: GraphStepSpec, signal: str) -> Any:
    """The payload of ``signal``, which opens ``step``'s gate; park (Suspend) until it comes."""
    statements, position = ex.env.store.statements, step.position
    async with ex.env.store.transaction() as conn:
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        row = await execute_async(
            conn,
            statements.signals.take_gate(
                ex.task.run_id, position=position, name=step.name, signal=signal
            ),
        )
        if row["found"]:
            ex.env.observer.signal_consumed(ex.task, signal)
            field = f"the payload of signal {signal!r}"
            return poison.check(ex.task.run_id, field, row["payload"])
        recorded = ex.cursor.at(position)
        if (
            recorded is not None
            and recorded.status == StepStatus.WAITING
            and recorded.wake_at is not None
            and row["db_now"] >= recorded.wake_at
        ):
            raise SignalTimeout(ex.task.run_id, signal, step.signal_timeout)
        parked = await execute_async(
            conn,
            statements.steps.gate_park(
                ex.task.fence,
                position=position,
                name=step.name,
                signal=signal,
                seconds=step.signal_timeout if step.signal_timeout is not None else FOREVER_SECONDS,
            ),
        )
    if not parked.leased:
        ex.lose_lease()
    ex.env.observer.run_waiting(ex.task, step.name, {"signal": signal})
    raise Suspend()


async def advance(
    conn: Any, env: ExecutionEnv, spec: GraphSpec, run_id: str, run_input: Any, task_id: int
) -> bool:
    """Decide what a graph run does next; whether steps were made ready. The caller
    holds the run's row lock."""
    statements = env.store.statements
    status = await execute_async(conn, statements.runs.lock(run_id))
    if status is None or status in (
        "completed",
        "failed",
        "cancelled",
        "compensated",
        "compensation_failed",
    ):
        return False
    found = await execute_async(conn, statements.steps.list(run_id))
    rows = {s.position: s for s in found}
    n = len(spec.steps)
    failed = [rows[p] for p in range(n) if p in rows and rows[p].status == StepStatus.FAILED]
    if status == "compensating" or failed:
        await _unwind(conn, env, spec, run_id, rows, failed, status, task_id)
        return False
    return await _forward(conn, env, spec, run_id, rows, run_input, task_id)


async def _forward(
    conn: Any,
    env: ExecutionEnv,
    spec: GraphSpec,
    run_id: str,
    rows: dict[int, Step],
    run_input: Any,
    task_id: int,
) -> bool:
    statements = env.store.statements
    state = {p: r.status for p, r in rows.items() if p < len(spec.steps)}
    outputs = {p: r.output for p, r in rows.items() if r.status == StepStatus.COMPLETED}
    ready: list[GraphStepSpec] = []
    for step in spec.steps:
        if step.position in state:
            continue
        if any(state.get(d) not in _DONE for d in step.depends_on):
            continue
        done = [d for d in step.depends_on if state[d] == StepStatus.COMPLETED]
        skip = (
            len(done) < len(step.depends_on)
            if step.join == "all"
            else bool(step.depends_on) and not done
        )
        reason = "a dependency was skipped"
        if not skip and step.when is not None:
            try:
                skip = not step.when(spec.step_input(step, outputs, run_input))
                reason = "its condition was false"
            except Exception as exc:
                record = serialization.error_record(exc, None)
                record["message"] = f"the condition of step {step.name!r} raised: {exc}"
                await _record(
                    conn, statements, run_id, step, "failed", serialization.error_json(record)
                )
                return await advance(conn, env, spec, run_id, run_input, task_id)
        if skip:
            await _record(conn, statements, run_id, step, "skipped", json.dumps({"reason": reason}))
            state[step.position] = StepStatus.SKIPPED
        else:
            ready.append(step)
            state[step.position] = StepStatus.PENDING
    if ready:
        await execute_async(
            conn,
            statements.steps.schedule(
                run_id,
                [s.position for s in ready],
                [s.name for s in ready],
                ["step"] * len(ready),
                head_start=parallel.head_start(len(ready)),
            ),
        )
    await execute_async(conn, statements.runs.progress(run_id))
    if all(state.get(s.position) in _DONE for s in spec.steps):
        output = {s.name: outputs[s.position] for s in spec.sinks() if s.position in outputs}
        text = serialization.dumps(
            output, f"the result of workflow {spec.name!r}", env.max_payload_bytes
        )
        if await execute_async(conn, statements.runs.finish(run_id, "completed", output_json=text)):
            env.run_finished(run_id, spec.name, "completed")
    return bool(ready)


async def _record(
    conn: Any, statements: Any, run_id: str, step: GraphStepSpec, status: str, error_json: str
) -> None:
    """Record a graph step nobody executes: skipped, or failed by its condition."""
    await execute_async(
        conn,
        statements.steps.record(
            run_id,
            position=step.position,
            name=step.name,
            kind="step",
            status=status,
            error_json=error_json,
        ),
    )


async def _unwind(
    conn: Any,
    env: ExecutionEnv,
    spec: GraphSpec,
    run_id: str,
    rows: dict[int, Step],
    failed: list[Step],
    status: str,
    task_id: int,
) -> None:
    """Stop the graph and run its compensations, newest completed step first."""
    statements, n = env.store.statements, len(spec.steps)
    if status != "compensating":
        error = dict(failed[0].error or {})
        error["step"] = failed[0].name
        await execute_async(
            conn, statements.runs.mark_compensating(run_id, serialization.error_json(error))
        )
        env.observer.run_compensating(run_id, None)
    if await execute_async(conn, statements.runs.halt_steps(run_id, task_id)):
        return  # a step still running: its completion continues from here
    undone: list[Step] = []
    for step in reversed(spec.steps):
        done = rows.get(step.position)
        if step.compensate is None or done is None or done.status != StepStatus.COMPLETED:
            continue
        record = rows.get(n + step.position)
        if record is None or record.status not in _FINAL:
            name = f"compensate:{step.name}"
            await execute_async(
                conn,
                statements.steps.schedule(run_id, [n + step.position], [name], ["compensation"]),
            )
            return
        undone.append(record)
    broken = [
        r.name.removeprefix("compensate:") for r in undone if r.status != StepStatus.COMPLETED
    ]
    final = "compensation_failed" if broken else "compensated" if undone else "failed"
    summary = serialization.error_json({"compensations_failed": broken}) if broken else None
    if await execute_async(conn, statements.runs.finish(run_id, final, error_json=summary)):
        env.run_finished(run_id, spec.name, final)
