"""Housekeeping every worker runs: heartbeats, and the reaper for expired leases.

Every worker runs the reaper; ``FOR UPDATE SKIP LOCKED`` in ``task_rescue``
makes concurrent reapers share the expired tasks instead of racing on them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from perdure.engine.control import Disconnected
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.maintenance")


async def heartbeat_loop(
    store: AsyncStore,
    worker_id: str,
    lease_seconds: float,
    interval: float,
    held: Callable[[], set[int]],
    on_lost: Callable[[int], None],
    on_beat: Callable[[], None] = lambda: None,
) -> None:
    """Extend the leases of the tasks this worker executes every ``interval`` s.

    Reports the tasks taken away. A failed heartbeat is logged and tried again
    at the next interval: if the database stays away longer than the lease,
    the tasks are rescued by another worker and this one's writes are fenced.
    """
    while True:
        await asyncio.sleep(interval)
        before = held()
        try:
            still = await store.execute(
                store.statements.tasks.heartbeat(worker_id, sorted(before), lease_seconds)
            )
        except (Exception, Disconnected) as exc:
            log.warning("heartbeat failed: %s", exc)
            continue
        on_beat()
        for task_id in before - still:
            if task_id in held():
                on_lost(task_id)


async def reaper_loop(
    store: AsyncStore,
    interval: float,
    stale_seconds: float,
    on_dead: Callable[[int], None] = lambda count: None,
) -> None:
    """Every ``interval`` s: revive expired leases, enforce deadlines, mark silent workers.

    ``on_dead`` is told how many tasks each pass dead-lettered.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            revived, dead = await store.execute(store.statements.tasks.rescue(limit=500))
            if revived or dead:
                log.info("reaper revived %d task(s), dead-lettered %d", revived, dead)
            if dead:
                on_dead(dead)
            expired = await store.execute(store.statements.runs.expire())
            if expired:
                log.info("cancelled %d run(s) past their deadline", expired)
            await store.execute(store.statements.workers.mark_lost(stale_seconds))
        except (Exception, Disconnected) as exc:
            log.warning("reaper failed: %s", exc)


async def status_loop(
    store: AsyncStore,
    queues: list[str],
    interval: float,
    report: Callable[[int, datetime | None], None],
) -> None:
    """Every ``interval`` s, report how many runs wait for a time and the next wake-up."""
    while True:
        try:
            waiting, next_wake = await store.execute(store.statements.tasks.waiting_summary(queues))
            report(waiting, next_wake)
        except (Exception, Disconnected) as exc:
            log.warning("status query failed: %s", exc)
        await asyncio.sleep(interval)
