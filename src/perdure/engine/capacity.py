"""Whether a worker's connections fit the server: checked once at start, a warning with the numbers.

A worker opens at most ``WorkerOptions.client_connections`` through its URL
(its statement pool and plain ``def`` steps' ``ctx.transaction`` pool), and
two more on the direct URL: its listener and, one worker at a time, the
maintenance pass. Without a pooler all of them reach the server; behind one,
the server sees only the two direct ones. When they cannot fit in what the
server allows (``max_connections`` less the superusers' reserve) beside the
connections already open, the worker says so, with the numbers, and serves
anyway: the connections are opened as needed, and a busy fleet may never
need them all.
"""

from __future__ import annotations

import logging

from perdure.engine.control import Disconnected
from perdure.engine.options import WorkerOptions
from perdure.store.store import AsyncStore

log = logging.getLogger("perdure.worker")

#: Connections on the direct URL: the listener, and the maintenance pass.
DIRECT_CONNECTIONS = 2


async def check(store: AsyncStore, options: WorkerOptions, name: str) -> str | None:
    """Warn (and return the warning) when the worker named ``name`` may need more server
    connections than the server has left; None when they fit or cannot be read."""
    try:
        allowed, reserved, used, own = await store.execute(
            store.statements.workers.server_connections(name)
        )
    except (Exception, Disconnected) as exc:
        log.debug("could not read the server's connection limits: %s", exc)
        return None
    pooled = store.endpoints.pooled
    needed = DIRECT_CONNECTIONS + (0 if pooled else options.client_connections)
    left = allowed - reserved - (used - own)
    if needed <= left:
        return None
    if pooled:
        what = f"{DIRECT_CONNECTIONS} direct connections (listener, maintenance pass)"
    else:
        what = (
            f"up to {needed} server connections (statement pool "
            f"{options.statement_pool_size}, ctx.transaction pool "
            f"{options.transaction_pool_size}, listener 1, maintenance pass 1)"
        )
    message = (
        f"this worker may open {what}, but the server allows {allowed - reserved} "
        f"(max_connections {allowed}, {reserved} reserved for superusers) and "
        f"{used - own} are in use by others: lower --pool-size or --concurrency, raise "
        "max_connections, or go through a pooler (docs/deploying.md#connection-math-for-n-workers)"
    )
    log.warning("%s", message)
    return message
