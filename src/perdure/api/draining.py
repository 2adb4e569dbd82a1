"""Running due work inline, in this process, with a worker's own code path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from perdure.api import workers
from perdure.api.core import Core
from perdure.api.handle import RunHandle, wait_result
from perdure.engine.options import Unpack, WorkerArguments
from perdure.errors import ResultTimeout

if TYPE_CHECKING:
    from perdure.engine.worker import Worker

#: The options of an inline worker, unless the caller gives others.
INLINE: WorkerArguments = {"poll_seconds": 0.02, "lease_seconds": 60.0, "concurrency": 8}


async def drain(
    make: Callable[..., Awaitable[Worker]], **options: Unpack[WorkerArguments]
) -> dict[str, int]:
    """Run all work due now with a worker from ``make`` until none is due; its counts."""
    inline: WorkerArguments = {**INLINE, **options}
    worker = await make(exit_when_idle=True, **inline)
    await worker.run()
    return dict(worker.counts)


async def run_until_complete(
    core: Core, /, run: RunHandle | str, **options: Unpack[WorkerArguments]
) -> Any:
    """Execute due work in this process until ``run`` finishes or nothing is due.

    The same code path as a worker (``perdure.testing.drain``); returns the
    run's result, or raises ResultTimeout if it still waits (a timer not yet
    due, a signal not yet sent).
    """
    run_id = run.id if isinstance(run, RunHandle) else (await core.portal.run(core.find(run))).id
    await drain(lambda **o: workers.worker(core, **o), **options)
    try:
        return await core.portal.run(wait_result(core, run_id, 0))
    except ResultTimeout as exc:
        raise ResultTimeout(exc.run_id, 0, exc.status) from None
