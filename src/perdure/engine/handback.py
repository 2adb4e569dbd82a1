"""Handing back a task whose execution met a fault of the database, once it answers again."""

from __future__ import annotations

import asyncio
import json
import logging

from perdure.engine.control import Disconnected
from perdure.engine.observer import task_fields
from perdure.store.connect import is_unavailable
from perdure.store.rows import ClaimedTask
from perdure.store.store import AsyncStore
from perdure.store.writes import Release

log = logging.getLogger("perdure.worker")


async def hand_back(
    store: AsyncStore,
    task: ClaimedTask,
    lease_seconds: float,
    stopping: asyncio.Event,
    fault: BaseException | None = None,
) -> None:
    """Give back ``task`` as soon as the database answers; ``fault`` is why it stopped.

    The checkpoints hold everything done so far, so the run can be
    replayed at once by any worker. Until the task is handed back it stays
    in the worker's ``running``: its heartbeat holds the lease, and it takes
    no lapse. If the database stays away longer than twice the lease (or the
    worker is ``stopping``), the lease is left to lapse and the reaper makes
    the task claimable instead.
    """
    detail = json.dumps({"reason": reason(fault)})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2 * lease_seconds
    delay = 0.25
    while True:
        try:
            await store.release_tasks(
                [
                    Release(
                        task.fence,
                        "run_released",
                        delay_seconds=due_after(fault),
                        detail_json=detail,
                    )
                ]
            )
            log.info(
                "run %s handed back after the database came back",
                task.run_id,
                extra=task_fields(task),
            )
            return
        except (Exception, Disconnected) as exc:
            if loop.time() + delay > deadline or stopping.is_set():
                log.warning(
                    "run %s not handed back (%s); its lease will lapse",
                    task.run_id,
                    exc,
                    extra=task_fields(task),
                )
                return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


#: SQLSTATE classes of a fault that lasts (a full disk, an exhausted resource,
#: a system error): the task handed back is due again after this many seconds,
#: so that workers do not claim and hand it back in a tight loop meanwhile.
LASTING_FAULTS = ("53", "58")
LASTING_DELAY = 1.0


def due_after(fault: BaseException | None) -> float:
    """How long a task handed back for ``fault`` waits before it is due again."""
    cause = fault.__cause__ if fault is not None else None
    state = getattr(cause, "sqlstate", None) or ""
    return LASTING_DELAY if state[:2] in LASTING_FAULTS else 0.0


def reason(fault: BaseException | None) -> str:
    """The reason a handed-back task's history records: unreachable, or the server's fault."""
    cause = fault.__cause__ if fault is not None else None
    if cause is None or is_unavailable(cause):
        return "database unreachable"
    return f"database fault: {getattr(cause, 'sqlstate', None) or type(cause).__name__}"
