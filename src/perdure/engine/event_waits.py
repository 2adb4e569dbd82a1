"""Durable waits for emitted events: ``ctx.wait_for_event``.

A wait for an event is a checkpoint of kind 'event_wait', like a wait for a
signal. In one transaction, under the event name's lock (see migration
0020), it takes the oldest matching event emitted since its start minus its
lookback that the run has not taken yet; if there is none it files itself
in ``event_waits`` for emitters to find and parks until its timeout. An
emitter that matches it completes the checkpoint with the event and makes
the run due in the emitter's own transaction; the run then replays to the
wait and returns the recorded event. A timed-out wait records 'timed_out'
and raises ``EventWaitTimeout`` on every replay. Updates are served at the
wait as at a sleep (engine/updates.py): before it looks, and again when a
request came in before it parks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from perdure.engine import poison, updates, waits
from perdure.engine.control import Suspend
from perdure.engine.executor import Execution
from perdure.errors import EventWaitTimeout
from perdure.store.store import execute_async
from perdure.types import EmittedEvent, Step, StepStatus


def _event(ex: Execution, name: str, output: Any) -> EmittedEvent:
    record = poison.refuse(ex, f"the event of the wait for {name!r}", output)
    return EmittedEvent.from_record(record)


async def wait_for_event(
    ex: Execution,
    name: str,
    match: dict[str, Any],
    lookback: float,
    timeout: float | None,
) -> EmittedEvent:
    """The first event ``name`` whose payload contains ``match``, emitted at most
    ``lookback`` s before the wait began or since; EventWaitTimeout after ``timeout`` s."""
    await ex.gate()
    step_name = f"event:{name}"
    position, recorded = ex.advance(step_name, "event_wait")
    if recorded is not None and recorded.status in (StepStatus.COMPLETED, StepStatus.TIMED_OUT):
        await updates.serve(ex, position, current=False)
        if recorded.status == StepStatus.COMPLETED:
            return _event(ex, name, recorded.output)
        raise EventWaitTimeout(ex.task.run_id, name, timeout)
    while True:
        await updates.serve(ex, position, current=True)
        ex.end_of_history()
        found = await _take_or_park(ex, name, match, lookback, timeout, position, recorded)
        if found is not None:
            return found


async def _take_or_park(
    ex: Execution,
    name: str,
    match: dict[str, Any],
    lookback: float,
    timeout: float | None,
    position: int,
    recorded: Step | None,
) -> EmittedEvent | None:
    """The event, or None when updates wait to be served; else park (Suspend) or
    time out (EventWaitTimeout)."""
    step_name = f"event:{name}"
    statements, fence = ex.env.store.statements, ex.task.fence
    # On a wait claimed again, the window is the one it parked with.
    since = None if recorded is None else recorded.started_at - timedelta(seconds=lookback)
    timed_out = False
    async with ex.env.store.transaction() as conn:
        # The name's lock first: emitters of the name hold it shared until
        # they commit, so what is looked for below is either committed and
        # found, or not emitted yet and the wait filed before the emitter looks.
        await execute_async(conn, statements.emissions.lock(name))
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        take = statements.emissions.take(
            fence,
            position=position,
            step_name=step_name,
            name=name,
            match=match,
            since=since,
            lookback=lookback,
        )
        taken = await execute_async(conn, take)
        if not taken.leased:
            ex.lose_lease()
        if taken.written:
            return _event(ex, name, taken.payload)
        if await updates.pending(ex, conn):
            return None  # requests came in: serve them, then look again
        if await waits.time_out(
            ex, conn, recorded, taken.db_now, position, step_name, "event_wait"
        ):
            await execute_async(conn, statements.emissions.unpark(ex.task.run_id, position))
            timed_out = True
        else:
            park = statements.emissions.park(
                fence, position=position, name=name, match=match, since=since, lookback=lookback
            )
            await execute_async(conn, park)
            await waits.park(
                ex,
                position,
                step_name,
                "event_wait",
                {"event": name, "match": match},
                wake_at=recorded.wake_at if recorded is not None else None,
                seconds=waits.FOREVER_SECONDS if timeout is None else timeout,
                conn=conn,
            )
    if timed_out:
        raise EventWaitTimeout(ex.task.run_id, name, timeout)
    raise Suspend()
