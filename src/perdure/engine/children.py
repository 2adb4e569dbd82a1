"""Child workflows: a run that starts runs and waits for their results.

Starting a child is a step (kind 'child'): the child's run row and the
parent's checkpoint commit in one transaction, and the child's key is derived
from the parent's run id and the step's position, so no replay ever starts a
second child. Waiting for its result is a durable wait (kind 'child_result'):
the parent parks without a slot and the child's final update wakes it (the
``runs_finished`` trigger). A child that does not complete raises ChildFailed
in the parent; a parent that is cancelled or fails cancels its unfinished
children (the same trigger). A parent that completes leaves them running.
"""

from __future__ import annotations

import json
from typing import Any

from perdure.engine import poison, serialization, updates
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import StaleHistory, Suspend
from perdure.engine.executor import Execution
from perdure.engine.waits import FOREVER_SECONDS, park
from perdure.errors import ChildFailed, RunKeyConflict, UnknownWorkflow
from perdure.store.store import execute_async
from perdure.store.writes import Start
from perdure.types import RunStatus, Step, StepStatus


async def _resolve(ex: Execution, workflow: str, version: int | None) -> tuple[str, int, str]:
    local = [
        spec
        for (name, v), spec in ex.env.specs.items()
        if name == workflow and (version is None or v == version)
    ]
    if local:
        spec = max(local, key=lambda s: s.version)
        return spec.name, spec.version, spec.queue
    row = await ex.env.store.execute(ex.env.store.statements.workflows.lookup(workflow, version))
    if row is None:
        raise UnknownWorkflow(workflow, version)
    return row["name"], row["version"], row["queue"]


async def start_child(
    ex: Execution,
    workflow: str,
    input: Any,
    *,
    key: str | None,
    version: int | None,
    run_id: str,
) -> str:
    """Start (once per run) a child run of ``workflow``; return the child's run id."""
    await ex.gate()
    name = f"child:{workflow}"
    position, recorded = ex.advance(name, "child")
    if recorded is not None and recorded.status == StepStatus.COMPLETED:
        return str(recorded.output["run_id"])
    ex.end_of_history()
    resolved = await _resolve(ex, workflow, version)
    text = serialization.dumps(
        input, f"the input of child workflow {workflow!r}", ex.env.max_payload_bytes
    )
    statements = ex.env.store.statements
    child_key = key if key is not None else f"{ex.task.run_id}:{position}"
    attempt = Attempt(position, name, "child", 1, statements.clock.wall_now())
    async with ex.env.store.transaction() as conn:
        if not await execute_async(conn, statements.tasks.lock_fenced(ex.task.fence)):
            ex.lose_lease()
        start = Start(
            run_id,
            resolved[0],
            resolved[1],
            resolved[2],
            child_key,
            text,
            parent_run_id=ex.task.run_id,
            trace_context_json=ex.env.observer.trace_context(ex.task),
        )
        (started,) = await ex.env.store.insert_runs([start], conn)
        if started is None:
            raise StaleHistory(f"starting a child of run {ex.task.run_id} raced; replaying")
        if started.workflow != resolved[0]:
            raise RunKeyConflict(child_key, started.workflow, resolved[0])
        output = json.dumps({"run_id": started.run_id, "workflow": resolved[0]})
        await ex.checkpoint(attempt, "completed", output, None, conn=conn)
    ex.env.observer.child_started(ex.task, started.run_id)
    return started.run_id


async def child_result(ex: Execution, child_run_id: str, workflow: str) -> Any:
    """Wait durably for a child run to finish; its output, or ChildFailed. Updates
    are served at the wait as at a sleep (engine/updates.py)."""
    await ex.gate()
    name = f"result:{workflow}"
    position, recorded = ex.advance(name, "child_result")
    if recorded is not None and recorded.status in (StepStatus.COMPLETED, StepStatus.FAILED):
        await updates.serve(ex, position, current=False)
        if recorded.status == StepStatus.COMPLETED:
            return recorded.output
        error = recorded.error or {}
        raise ChildFailed(name, child_run_id, str(error.get("status", "failed")), error)
    while True:
        await updates.serve(ex, position, current=True)
        ex.end_of_history()
        found = await _take_or_park(ex, child_run_id, workflow, name, position, recorded)
        if found is not _SERVE:
            return found


#: What _take_or_park answers when requests came in: serve them, then look again.
_SERVE = object()


async def _take_or_park(
    ex: Execution,
    child_run_id: str,
    workflow: str,
    name: str,
    position: int,
    recorded: Step | None,
) -> Any:
    """The child's output, or _SERVE when updates wait to be served; else park
    (Suspend) or raise ChildFailed."""
    statements = ex.env.store.statements
    started = recorded.started_at if recorded is not None else statements.clock.wall_now()
    attempt = Attempt(position, name, "child_result", 1, started)
    serving = ex.update_handlers is not None
    async with ex.env.store.transaction() as conn:
        if serving:
            # The run's own lock first, as a sleep takes it: a request committed
            # before is served below, one sent after sees the run waiting. First,
            # because cancelling this run locks it and then its children's rows.
            await execute_async(conn, statements.runs.lock(ex.task.run_id))
        # A shared lock on the child's row: it cannot finish between this
        # read and the park below, so its final update sees the parked task.
        row = await execute_async(conn, statements.runs.child_status(child_run_id))
        if row is None:
            raise ChildFailed(name, child_run_id, "missing", {"message": "the child run is gone"})
        status = RunStatus(row["status"])
        if status == RunStatus.COMPLETED:
            poison.refuse(ex, f"the output of child run {child_run_id}", row["output"])
            output = json.dumps(row["output"])
            await ex.checkpoint(attempt, "completed", output, None, conn=conn)
            return row["output"]
        if status.is_final:
            error = dict(row["error"] or {})
            error["status"] = status.value
            error["child_run_id"] = child_run_id
            text = serialization.error_json(error)
            await ex.checkpoint(attempt, "failed", None, text, conn=conn)
            failure = ChildFailed(name, child_run_id, status.value, row["error"])
        else:
            if serving and await updates.pending(ex, conn):
                return _SERVE
            await park(
                ex,
                position,
                name,
                "child_result",
                {"child": child_run_id, "workflow": workflow},
                seconds=FOREVER_SECONDS,
                conn=conn,
            )
            failure = None
    if failure is not None:
        raise failure
    raise Suspend()
