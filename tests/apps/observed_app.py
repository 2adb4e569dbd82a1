"""An application for the observability tests: ``perdure worker apps.observed_app:app``.

Its steps log through a logger of their own, so a test can see the run's
fields added to records that workflow code writes.
"""

from __future__ import annotations

import logging

import perdure

app = perdure.App()
log = logging.getLogger("observed")
ONE_RETRY = perdure.RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)


def ship(order: int) -> int:
    """A plain step: runs on a worker thread, logs, succeeds."""
    log.info("shipping order %d", order)
    return order


def charge(order: int) -> int:
    """A step that always fails: retried once, then failed for good."""
    raise ValueError(f"card declined for order {order}")


@app.workflow("observed_ship")
def observed_ship(ctx: perdure.SyncContext, order: int) -> int:
    """One step that logs."""
    return ctx.step("ship", ship, order)


@app.workflow("observed_fail")
async def observed_fail(ctx: perdure.Context, order: int) -> int:
    """One step that fails twice."""
    return await ctx.step("charge", charge, order, retry=ONE_RETRY)
