"""Retention: prune or archive finished runs in batches, and keep history's day partitions.

A pass runs on one connection that holds the schema's maintenance lock (a
session advisory lock), so among all workers and ``perdure prune`` commands
one at a time does the work; the others skip their turn. A pass:

1. creates the day partitions of ``history`` from today to
   ``DAYS_AHEAD`` days ahead where missing;
2. when asked to prune, deletes (or archives) finished runs older than the
   cutoff in batches, each batch one statement and so one short transaction
   (``FOR UPDATE SKIP LOCKED``: runs someone holds are left for next time);
3. drops the partitions of history that end before the cutoff, one per
   transaction (entries of runs still kept move to the default partition
   first), then deletes the default partition's old entries of gone runs;
4. deletes the audit entries older than the cutoff, when the pass runs as
   the schema's owner (the audit table is append-only for other roles).
   The offloaded payloads (store/offload.py) of the runs deleted (not
   archived) are deleted from their object store after each batch.
5. deletes the emitted events (``app.emit``) recorded before the cutoff, in
   batches, with the record of which runs each woke or started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from perdure.engine.control import Disconnected
from perdure.store import session
from perdure.store.store import AsyncStore
from perdure.types import PruneResult

log = logging.getLogger("perdure.retention")

#: Day partitions of history kept ready ahead of today.
DAYS_AHEAD = 3
#: Old entries of gone runs deleted from the default partition per pass, at most.
DEFAULT_PARTITION_BATCH = 10_000


async def prune(
    store: AsyncStore,
    conn: session.AsyncConnection,
    cutoff: datetime,
    *,
    archive: bool,
    batch_size: int,
    dry_run: bool = False,
) -> PruneResult:
    """Prune (or archive) runs finished before ``cutoff``, then drop history partitions."""
    statements = store.statements
    if dry_run:
        count = await store.execute(statements.runs.prune_count(cutoff), conn)
        partitions = await store.execute(statements.history.partition_list(), conn)
        doomed = [p["name"] for p in partitions if not p["is_default"] and p["to_at"] <= cutoff]
        return PruneResult(cutoff, count, 0, archive, True, doomed)
    total = batches = 0
    while True:
        pruned, refs = await store.execute(
            statements.runs.prune(cutoff, limit=batch_size, archive=archive), conn
        )
        batches += 1
        total += pruned
        if refs:
            await delete_objects(store, refs)
        if pruned < batch_size:
            break
    dropped: list[str] = []
    postponed = False
    try:
        with session.lock_busy():
            while (
                name := await store.execute(statements.history.partition_drop(cutoff), conn)
            ) is not None:
                dropped.append(name)
                log.info("dropped history partition %s (older than %s)", name, cutoff)
            await store.execute(
                statements.history.default_prune(cutoff, DEFAULT_PARTITION_BATCH), conn
            )
    except session.LockBusy:
        # Writers of history held their locks past lock_timeout: waiting
        # longer would stall every writer queued behind this DDL.
        postponed = True
        log.warning("history partitions busy; dropping them is postponed to the next pass")
    events = 0
    while True:
        deleted = await store.execute(statements.emissions.prune(cutoff, batch_size), conn)
        events += deleted
        if deleted < batch_size:
            break
    # The audit record keeps as long as history; only the owner may delete it.
    audit = await store.execute(statements.audits.prune(cutoff), conn)
    return PruneResult(
        cutoff, total, batches, archive, False, dropped, postponed, audit=audit, events=events
    )


async def delete_objects(store: AsyncStore, refs: list[str]) -> None:
    """Delete the offloaded payloads ``refs`` of pruned runs (in a thread: stores block).

    After their rows are gone: a failure leaves objects no row references
    (logged), never a row referencing a missing object.
    """
    offload = store.statements.payloads.offload
    if offload is None:
        return
    try:
        deleted = await asyncio.to_thread(offload.delete_refs, refs)
        log.info("deleted %d offloaded payload(s) of pruned runs", deleted)
    except Exception as exc:
        log.warning("deleting %d offloaded payload(s) failed: %s", len(refs), exc)


async def maintenance_pass(
    store: AsyncStore,
    *,
    prune_after: float | None,
    archive: bool,
    batch_size: int,
    cutoff: datetime | None = None,
    dry_run: bool = False,
) -> PruneResult | None:
    """One pass as this schema's maintainer; None when another holds the lock.

    Without ``prune_after`` (seconds) or ``cutoff``, only the partitions are
    created ahead. ``cutoff`` (a time) wins over ``prune_after``.
    """
    statements = store.statements
    async with store.connection() as conn:
        if not await store.execute(statements.workers.maintenance_lock(), conn):
            return None
        try:
            if not dry_run:
                try:
                    with session.lock_busy():
                        ensure = statements.history.partitions_ensure(DAYS_AHEAD)
                        created = await store.execute(ensure, conn)
                    if created:
                        log.info("created %d history partition(s) ahead", created)
                except session.LockBusy:
                    log.warning("history busy; creating its partitions is postponed")
            if cutoff is None and prune_after is not None:
                cutoff = await store.execute(statements.runs.prune_cutoff(prune_after), conn)
            if cutoff is None:
                return None
            return await prune(
                store, conn, cutoff, archive=archive, batch_size=batch_size, dry_run=dry_run
            )
        finally:
            await store.execute(statements.workers.maintenance_unlock(), conn)


async def maintenance_loop(
    store: AsyncStore,
    *,
    interval: float,
    prune_after: float | None,
    archive: bool,
    batch_size: int,
    report: Callable[[PruneResult | None], None],
) -> None:
    """Run ``maintenance_pass`` now and every ``interval`` seconds; report each."""
    while True:
        try:
            result = await maintenance_pass(
                store, prune_after=prune_after, archive=archive, batch_size=batch_size
            )
            if result is not None and result.runs:
                log.info(
                    "%s %d run(s) finished before %s in %d batch(es)",
                    "archived" if result.archived else "pruned",
                    result.runs,
                    result.cutoff,
                    result.batches,
                )
            report(result)
        except (Exception, Disconnected) as exc:
            log.warning("maintenance pass failed: %s", exc)
        await asyncio.sleep(interval)
