"""Durable waits and publications: sleeps, signals, events and streams.

A wait is a checkpoint like a step. Its first execution writes it in status
'waiting' with a wake time and hands the task back due at that time, so the
run holds no worker slot, thread or connection while it waits. When the task
is claimed again the workflow replays to the wait, which then completes (the
time has come, the signal is there), times out, or parks again.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from perdure.engine import poison, serialization, typed, updates
from perdure.engine.checkpoint import Attempt
from perdure.engine.control import Suspend
from perdure.engine.executor import Execution
from perdure.errors import SignalTimeout
from perdure.store import session
from perdure.store.rows import Fenced
from perdure.store.store import execute_async
from perdure.types import Step, StepStatus

#: A wait with no timeout parks for a century; a signal wakes it long before.
FOREVER_SECONDS = 100 * 365 * 86400.0


async def park(
    ex: Execution,
    position: int,
    name: str,
    kind: str,
    waiting_for: dict[str, Any],
    *,
    wake_at: datetime | None = None,
    seconds: float | None = None,
    conn: Any = None,
) -> None:
    """Park the run at the wait at ``position``: hand its task back due at the wake time."""
    statements = ex.env.store.statements
    stmt = statements.steps.wait(
        ex.task.fence,
        position=position,
        name=name,
        kind=kind,
        waiting_for_json=json.dumps(waiting_for),
        wake_at=wake_at,
        seconds=seconds,
        wait_signal=waiting_for.get("signal"),
    )
    if conn is not None:
        result = await execute_async(conn, stmt)
    else:
        result = await ex.env.store.execute(stmt)
    if not result.leased:
        ex.lose_lease()
    ex.env.observer.run_waiting(ex.task, name, waiting_for)


async def time_out(
    ex: Execution,
    conn: session.AsyncConnection,
    recorded: Step | None,
    db_now: datetime | None,
    position: int,
    step_name: str,
    kind: str,
) -> bool:
    """Write the timed-out checkpoint of the wait recorded at ``position`` (a wait of
    ``kind``) on ``conn`` when the database's clock ``db_now`` has passed its deadline;
    whether it did. A wait with no deadline, or not yet due, writes nothing."""
    if recorded is None or recorded.wake_at is None or db_now is None:
        return False
    if db_now < recorded.wake_at:
        return False
    attempt = Attempt(position, step_name, kind, 1, recorded.started_at)
    record = ex.checkpoint_record(attempt, "timed_out", None, None)
    await execute_async(conn, ex.env.store.statements.steps.write(record))
    return True


def _due(ex: Execution, recorded: Step) -> bool:
    now = ex.task.db_now
    return recorded.wake_at is not None and now is not None and now >= recorded.wake_at


async def sleep(
    ex: Execution, *, seconds: float | None = None, until: datetime | None = None
) -> None:
    """Wait durably for ``seconds`` or until the aware datetime ``until``."""
    await ex.gate()
    position, recorded = ex.advance("sleep", "sleep")
    if recorded is not None and recorded.status == StepStatus.COMPLETED:
        await updates.serve(ex, position, current=False)
        return
    while True:
        await updates.serve(ex, position, current=True)
        ex.end_of_history()
        if recorded is not None and _due(ex, recorded):
            attempt = Attempt(position, "sleep", "sleep", 1, recorded.started_at)
            await ex.checkpoint(attempt, "completed", "null", None)
            return
        if recorded is not None:
            # Claimed before its time without being woken: wait for the same time.
            until, seconds = recorded.wake_at, None
        if ex.update_handlers is None:
            await park(
                ex, position, "sleep", "sleep", {"sleep": True}, wake_at=until, seconds=seconds
            )
            raise Suspend()
        async with ex.env.store.transaction() as conn:
            # Under the run's lock, as for a signal: a request committed
            # before is served now, one sent after sees the run waiting.
            await execute_async(conn, ex.env.store.statements.runs.lock(ex.task.run_id))
            if not await updates.pending(ex, conn):
                await park(
                    ex,
                    position,
                    "sleep",
                    "sleep",
                    {"sleep": True},
                    wake_at=until,
                    seconds=seconds,
                    conn=conn,
                )
                parked = True
            else:
                parked = False
        if parked:
            raise Suspend()


async def wait_for_signal(
    ex: Execution, name: str, timeout: float | None, hint: typed.Hint = typed.UNTYPED
) -> Any:
    """Return the payload of the next signal ``name`` (rebuilt as ``hint`` declares);
    SignalTimeout after ``timeout`` s."""
    payload = await _signal_payload(ex, name, timeout)
    poison.refuse(ex, f"the payload of signal {name!r}", payload)
    return hint.rebuild(payload, f"the payload of signal {name!r}")


async def _signal_payload(ex: Execution, name: str, timeout: float | None) -> Any:
    await ex.gate()
    step_name = f"signal:{name}"
    position, recorded = ex.advance(step_name, "signal")
    if recorded is not None and recorded.status == StepStatus.COMPLETED:
        await updates.serve(ex, position, current=False)
        return recorded.output
    if recorded is not None and recorded.status == StepStatus.TIMED_OUT:
        await updates.serve(ex, position, current=False)
        raise SignalTimeout(ex.task.run_id, name, timeout)
    while True:
        await updates.serve(ex, position, current=True)
        ex.end_of_history()
        found = await _take_or_park(ex, name, timeout, position, step_name, recorded)
        if found is not _SERVE:
            return found


#: What _take_or_park answers when requests came in: serve them, then try again.
_SERVE = object()


async def _take_or_park(
    ex: Execution,
    name: str,
    timeout: float | None,
    position: int,
    step_name: str,
    recorded: Step | None,
) -> Any:
    """The signal's payload, or _SERVE when updates wait to be served; else park
    (Suspend) or time out (SignalTimeout)."""
    statements, fence = ex.env.store.statements, ex.task.fence
    take = statements.signals.take(fence, position=position, name=name, step_name=step_name)
    if recorded is not None:
        # Woken at a wait it parked at: most likely by the signal. Lock and
        # take it in one round trip (one pipelined transaction); if it is not
        # there, the transaction below decides between timing out and parking.
        _, taken = (
            await ex.env.store.execute_batch([[statements.runs.lock(ex.task.run_id), take]])
        )[0]
        if _taken(ex, taken, name):
            return taken.payload
    timed_out = False
    async with ex.env.store.transaction() as conn:
        # The run's row lock orders this wait against send_signal: either the
        # signal is committed and found below, or our 'waiting' state is
        # committed first and the sender sees it and wakes the run.
        await execute_async(conn, statements.runs.lock(ex.task.run_id))
        taken = await execute_async(conn, take)
        if _taken(ex, taken, name):
            return taken.payload
        if await updates.pending(ex, conn):
            return _SERVE
        if await time_out(ex, conn, recorded, taken.db_now, position, step_name, "signal"):
            timed_out = True
        else:
            wake_at = recorded.wake_at if recorded is not None else None
            await park(
                ex,
                position,
                step_name,
                "signal",
                {"signal": name},
                wake_at=wake_at,
                seconds=FOREVER_SECONDS if timeout is None else timeout,
                conn=conn,
            )
    if timed_out:
        raise SignalTimeout(ex.task.run_id, name, timeout)
    raise Suspend()


def _taken(ex: Execution, taken: Fenced, name: str) -> bool:
    """Whether signal_take consumed a signal; stop (lease lost) if the task is not ours."""
    if not taken.leased:
        ex.lose_lease()
    if taken.written:
        ex.env.observer.signal_consumed(ex.task, name)
    return taken.written


async def publish(ex: Execution, kind: str, key: str, value: Any, *, closed: bool = False) -> None:
    """Publish an event value, or append to (or close) a stream, exactly once per position."""
    await ex.gate()
    if kind == "stream":
        seq = ex.next_stream_seq(key)
    name = f"{kind}:{key}"
    position, recorded = ex.advance(name, kind)
    if recorded is not None:
        return
    ex.end_of_history()
    text = serialization.dumps(value, f"the value of {kind} {key!r}", ex.env.max_payload_bytes)
    attempt = Attempt(position, name, kind, 1, ex.env.store.statements.clock.wall_now())
    await ex.checkpoint(
        attempt,
        "completed",
        text,
        None,
        event_key=key,
        stream_seq=seq if kind == "stream" else None,
        stream_closed=closed,
    )
