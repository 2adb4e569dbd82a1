"""Ticking schedules: every worker starts the runs of due ticks, once per tick in all.

Each worker runs ``tick_loop``. For each due schedule it opens a
transaction, locks the schedule's row with ``FOR UPDATE SKIP LOCKED`` (a
schedule another worker is ticking is skipped, not waited for), starts a run
for each tick the schedule's catch-up policy keeps, and moves ``next_tick``
past them before it commits. A worker that looks a moment later finds the
schedule not due. Should two ever try the same tick anyway, the run's key
``schedule:<name>:<tick in UTC>`` makes the second start return the first
run (invariant 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from perdure.engine import cron
from perdure.engine.control import Disconnected
from perdure.errors import RunNotFound, UnknownWorkflow
from perdure.ids import new_run_id
from perdure.store import session
from perdure.store.statement import Row
from perdure.store.store import AsyncStore
from perdure.store.writes import Start

log = logging.getLogger("perdure.schedules")


def tick_key(schedule: str, tick: datetime) -> str:
    """The run key of one tick: ``schedule:<name>:<tick as UTC ISO 8601, to the second>``."""
    return f"schedule:{schedule}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


@dataclass(frozen=True)
class Started:
    """A run a schedule started (or found already started, ``created`` False)."""

    schedule: str
    tick: datetime
    run_id: str
    created: bool


async def start_run(
    store: AsyncStore,
    conn: session.AsyncConnection,
    schedule: str,
    workflow: str,
    input_json: str,
    tick: datetime,
    key: str | None,
) -> Started:
    """Start one run of ``workflow`` for ``tick`` in the caller's transaction.

    The newest registered version of the workflow is started, in its queue;
    the run is marked with its schedule and tick (``ctx.scheduled_at``).
    """
    target = await store.execute(store.statements.workflows.lookup(workflow, None), conn)
    if target is None:
        raise UnknownWorkflow(workflow)
    start = Start(new_run_id(), target["name"], target["version"], target["queue"], key, input_json)
    # A concurrent start of the same key can leave one statement's snapshot
    # without either row (see run_insert); the next statement sees it.
    for _ in range(5):
        (result,) = await store.insert_runs([start], conn)
        if result is not None:
            break
    else:
        raise RunNotFound(key or "")
    if result.created:
        await store.execute(store.statements.runs.set_schedule(result.run_id, schedule, tick), conn)
    return Started(schedule, tick, result.run_id, result.created)


async def tick_one(store: AsyncStore, name: str) -> list[Started] | None:
    """Start the due ticks of schedule ``name``; None if it is not due or another worker has it."""
    async with store.transaction() as conn:
        row = await store.execute(store.statements.schedules.lock_due(name), conn)
        if row is None:
            return None
        plan = _plan(row)
        started = [
            await start_run(
                store, conn, name, row["workflow"], row["input_json"], tick, tick_key(name, tick)
            )
            for tick in plan.fire
        ]
        last = started[-1] if started else None
        await store.execute(
            store.statements.schedules.advance(
                name,
                plan.next_tick,
                last.tick if last else None,
                last.run_id if last else None,
            ),
            conn,
        )
    if plan.skipped_from is not None:
        until = f"before {plan.fire[0].isoformat()}" if plan.fire else "up to now"
        log.warning(
            "schedule %s: skipped the ticks from %s %s (catchup=%s, max_catchup=%d)",
            name,
            plan.skipped_from.isoformat(),
            until,
            row["catchup"],
            row["max_catchup"],
        )
    for run in started:
        if run.created:
            log.info("schedule %s: started run %s for %s", name, run.run_id, run.tick.isoformat())
    return started


def _plan(row: Row) -> cron.Plan:
    expression = cron.parse(row["cron"], row["timezone"], row["name"])
    return cron.plan(
        expression, row["next_tick"], row["db_now"], row["catchup"], row["max_catchup"]
    )


@dataclass(frozen=True)
class Ticked:
    """What one round of ticking did."""

    #: The runs started, in tick order per schedule.
    started: list[Started]
    #: How many schedules this worker advanced (a "skip" may advance without a start).
    advanced: int
    #: Seconds until the next tick of any running schedule, as the round began.
    seconds: float | None


async def tick_due(store: AsyncStore, limit: int = 100) -> Ticked:
    """Tick every due schedule once: the runs started, and when the next tick is.

    A schedule that cannot start its runs (its workflow is not registered)
    is logged and left due; the others go on.
    """
    due, seconds = await store.execute(store.statements.schedules.due(limit))
    started: list[Started] = []
    advanced = 0
    for name in due:
        try:
            found = await tick_one(store, name)
        except Exception as exc:  # one broken schedule must not stop the others
            log.warning("schedule %s: could not start its runs: %s", name, exc)
            continue
        if found is not None:
            advanced += 1
            started.extend(found)
    return Ticked(started, advanced, seconds)


#: How long the ticker sleeps at most while schedule changes are notified:
#: the same safety net as the claim loop's fallback poll.
QUIET_SECONDS = 60.0


@dataclass(frozen=True)
class Nudge:
    """What tells the ticker that a schedule was written, changed, paused or resumed.

    ``event`` is set (on the loop) when the wakeup channel carries the
    schedules' payload; ``listening()`` says whether such notifications
    arrive now (the worker's LISTEN connection is up).
    """

    event: asyncio.Event
    listening: Callable[[], bool]


async def tick_loop(store: AsyncStore, poll_seconds: float, nudge: Nudge | None = None) -> None:
    """Tick due schedules until cancelled: sleep until the next tick, or until told.

    The ticker wakes for the next tick it knows of, to the moment. A schedule
    added, changed or resumed elsewhere notifies (``nudge``): while those
    notifications arrive the ticker sleeps at most QUIET_SECONDS between two
    looks, else at most ``poll_seconds`` (also with a test's virtual clock,
    which moves without telling anyone). A round that advanced nothing
    although schedules were due (another worker holds them, or they cannot
    start) waits the whole ``poll_seconds``, so a broken schedule is not
    retried in a busy loop. A database outage is logged and retried with
    capped backoff.
    """
    backoff = 0.0
    while True:
        if nudge is not None:
            nudge.event.clear()  # a change from here on is seen by this round or the next
        try:
            ticked = await tick_due(store)
            backoff = 0.0
            if ticked.advanced:
                continue  # look again at once: next ticks moved
            cap = _cap(store, poll_seconds, nudge)
            seconds = ticked.seconds
            wait = cap if seconds is None else min(max(seconds, 0.005), cap)
            if seconds is not None and seconds <= 0:
                wait = poll_seconds
        except (Exception, Disconnected) as exc:
            backoff = min(max(backoff * 2, 0.25), 5.0)
            log.warning("ticking schedules failed (%s); retrying in %.2f s", exc, backoff)
            wait = backoff
        if nudge is None:
            await asyncio.sleep(wait)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(nudge.event.wait(), wait)


def _cap(store: AsyncStore, poll_seconds: float, nudge: Nudge | None) -> float:
    """The longest the ticker sleeps: QUIET_SECONDS while changes are notified."""
    if nudge is None or not nudge.listening() or store.statements.clock.is_virtual:
        return poll_seconds
    return max(poll_seconds, QUIET_SECONDS)


async def trigger(store: AsyncStore, name: str) -> Started | None:
    """Start one run of schedule ``name`` now, outside its ticks; None if there is no such schedule.

    The run's ``scheduled_at`` is now; the schedule's next tick is unchanged.
    """
    async with store.transaction() as conn:
        row = await store.execute(store.statements.schedules.get(name), conn)
        if row is None:
            return None
        return await start_run(
            store, conn, name, row["workflow"], row["input_json"], row["db_now"], None
        )
