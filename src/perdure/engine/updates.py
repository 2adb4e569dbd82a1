"""Updates served at a run's durable waits: validate, accept, apply, reply.

A run serves its updates where it waits (``ctx.sleep``, ``ctx.wait_for_signal``):
there its worker reads the requests not decided yet, oldest first. A request
whose validator refuses it is marked rejected, and nothing else is written:
no history event, no step. An accepted one is recorded (history
``update_accepted``, with the position of the wait it is applied at and its
order there), its handler runs as part of the run's execution (its steps take
the next positions, checkpointed like the body's), and its reply is stored.

A replay applies the same updates again at the same waits, in the same order
(``anchor_position``, ``seq``), so the handlers' steps replay from their
checkpoints; a reply already stored is not written again, and one missing
(the worker died between accepting and replying) is written then: each
update is replied to exactly once. A handler may reply before it returns
(``ctx.reply``): the reply is written then, and what the handler returns
after is not a second reply.
"""

from __future__ import annotations

import traceback
from typing import Any, Protocol

from perdure.engine import serialization
from perdure.engine.executor import Execution
from perdure.errors import WorkflowDefinitionError
from perdure.store.rows import Fenced
from perdure.store.statement import Row
from perdure.store.store import execute_async


class UpdateHandlers(Protocol):
    """The update handlers of the workflow an execution runs (declared in the api)."""

    def refusal(self, name: str, payload: Any) -> str | None:
        """Why update ``name`` with ``payload`` is refused (no handler, its validator
        raised), or None to accept it. Writes nothing."""

    async def apply(self, execution: Execution, name: str, payload: Any) -> Any:
        """Run the handler of update ``name`` with ``payload``; its reply."""


async def serve(ex: Execution, position: int, *, current: bool) -> None:
    """Apply the updates recorded at the wait at ``position`` again (a replay), then,
    when the wait is ``current`` (not finished yet), decide and apply the new ones."""
    handlers: UpdateHandlers | None = ex.update_handlers
    if handlers is None or ex.step_task_position is not None:
        return
    if ex.replay_only:
        await _replay_recorded(ex, handlers, position)
        return
    applied = await _applied(ex)
    for row in applied.get(position, []):
        # A wait serves again after new requests came in: apply each one once.
        if not row.get("applied"):
            await _apply(ex, handlers, row, replay=True)
    if not current:
        return
    statements = ex.env.store.statements
    while True:
        requested = await ex.env.store.execute(statements.updates.requested(ex.task.run_id))
        if not requested:
            return
        ex.end_of_history()
        for row in requested:
            await _decide(ex, handlers, position, row, applied)


async def _replay_recorded(ex: Execution, handlers: UpdateHandlers, position: int) -> None:
    """check-replay (no store): apply the updates recorded at the wait at ``position``
    again, in their order, as the worker's replay does; no reply is written."""
    for row in (ex.applied_updates or {}).get(position, []):
        if row.get("applied"):
            continue
        row["applied"] = True
        previous, ex.current_update = ex.current_update, row
        try:
            await handlers.apply(ex, row["name"], row["payload"])
        except Exception:
            pass  # a handler's error is its reply: the run went on (as in _apply)
        finally:
            ex.current_update = previous


async def pending(ex: Execution, conn: Any) -> bool:
    """Whether requests wait to be decided, read on ``conn`` under the run's lock
    (a wait checks this before it parks, so no request is left unserved)."""
    if ex.update_handlers is None or ex.step_task_position is not None or ex.replay_only:
        return False
    rows = await execute_async(conn, ex.env.store.statements.updates.requested(ex.task.run_id))
    return bool(rows)


async def _applied(ex: Execution) -> dict[int, list[Row]]:
    """The accepted updates of the run, by wait position, read once per execution."""
    if ex.applied_updates is None:
        rows = await ex.env.store.execute(ex.env.store.statements.updates.applied(ex.task.run_id))
        by_position: dict[int, list[Row]] = {}
        for row in rows:
            by_position.setdefault(row["anchor_position"], []).append(row)
        ex.applied_updates = by_position
    found: dict[int, list[Row]] = ex.applied_updates
    return found


async def _decide(
    ex: Execution,
    handlers: UpdateHandlers,
    position: int,
    row: Row,
    applied: dict[int, list[Row]],
) -> None:
    """Refuse a request (its row only) or accept it and apply it now."""
    statements, name = ex.env.store.statements, row["name"]
    await ex.deferred.flush_now()
    ex.check_alive()
    reason = handlers.refusal(name, row["payload"])
    if reason is not None:
        error = {"type": "UpdateRejected", "message": reason}
        await ex.env.store.execute(
            statements.updates.reject(row["id"], serialization.error_json(error))
        )
        return
    here = applied.setdefault(position, [])
    seq = len(here)
    accepted: Fenced = await ex.env.store.execute(
        statements.updates.accept(ex.task.fence, row["id"], position=position, seq=seq)
    )
    ex.fenced(accepted, stale=f"update {row['update_id']} was decided by another execution")
    accepted_row = dict(row, status="accepted", anchor_position=position, seq=seq)
    here.append(accepted_row)
    await _apply(ex, handlers, accepted_row, replay=False)


async def _apply(ex: Execution, handlers: UpdateHandlers, row: Row, *, replay: bool) -> None:
    """Run an accepted update's handler; store its reply unless one is stored (a
    reply the handler sent early with ``ctx.reply``, or one of an earlier execution)."""
    name = row["name"]
    row["applied"] = True
    status, result_json, error_json = "completed", None, None
    previous, ex.current_update = ex.current_update, row
    try:
        result = await handlers.apply(ex, name, row["payload"])
        result_json = serialization.dumps(
            result, f"the reply of update {name!r}", ex.env.max_payload_bytes
        )
    except Exception as exc:
        status = "failed"
        error_json = serialization.error_json(
            serialization.error_record(exc, traceback.format_exc())
        )
    finally:
        ex.current_update = previous
    if row.get("replied"):
        return  # replied early: what the handler returned (or raised) after is no reply
    if replay and row["status"] != "accepted":
        return
    await _write_reply(ex, row, status, result_json, error_json)


async def reply(ex: Execution, value: Any) -> None:
    """Reply to the update whose handler runs now with ``value``, before the handler
    returns (``ctx.reply``): the caller gets it at once while the handler and the run
    go on. Written once: a replay that reaches it again finds the stored reply and
    writes nothing."""
    await ex.gate()
    row = ex.current_update
    if row is None:
        raise WorkflowDefinitionError("ctx.reply answers an update: call it in an update handler")
    if row.get("replied"):
        raise WorkflowDefinitionError(
            f"update {row['update_id']!r} ({row['name']!r}) was replied to already"
        )
    text = serialization.dumps(
        value, f"the reply of update {row['name']!r}", ex.env.max_payload_bytes
    )
    row["replied"] = True
    await _write_reply(ex, row, "completed", text, None)


async def _write_reply(
    ex: Execution, row: Row, status: str, result_json: str | None, error_json: str | None
) -> None:
    """Store the reply of ``row`` unless one is stored (fenced; check-replay writes none)."""
    if ex.replay_only or row.get("status") != "accepted":
        return
    await ex.deferred.flush_now()
    replied = await ex.env.store.execute(
        ex.env.store.statements.updates.reply(
            ex.task.fence, row["id"], status=status, result_json=result_json, error_json=error_json
        )
    )
    ex.fenced(replied)
    row["status"] = status
