"""Queues: concurrency, partition and rate limits declared in code and changed by operators.

A queue's settings live in the ``queues`` table, where every worker's claim
reads them. Code declares them with ``app.queue(...)``; a worker records the
settings its code states when it starts. An operator changes them at any time
with ``perdure queues set`` (``app.set_queue``); that change lasts until a
worker whose code states the same setting starts again.
"""

from __future__ import annotations

from perdure.api.core import Core
from perdure.api.queue_settings import UNSET, Limit, QueueDef, Rate, Unset
from perdure.errors import ConfigurationError, WorkflowDefinitionError
from perdure.store.store import AsyncStore
from perdure.types import QueueInfo

__all__ = ["UNSET", "Limit", "QueueDef", "Rate", "Unset", "declare", "queues", "set_queue"]


def declare(
    core: Core,
    name: str,
    *,
    concurrency: Limit = UNSET,
    worker_concurrency: Limit = UNSET,
    partition_concurrency: Limit = UNSET,
    rate_limit: Rate = UNSET,
    rate_per_key: bool | Unset = UNSET,
) -> QueueDef:
    """Declare the limits of queue ``name``; a worker records them when it starts.

    ``concurrency=2``: at most 2 tasks of the queue run at once across all
    workers. ``worker_concurrency=1``: at most 1 per worker.
    ``partition_concurrency=1``: at most 1 per partition key (runs started
    with ``partition_key=``), fair across keys. ``rate_limit=(10, 60)``: at
    most 10 tasks claimed per 60 seconds across all workers; per partition
    key with ``rate_per_key=True``. None states "no limit"; a setting left
    out keeps the value the database has (set by an operator, or by an
    earlier declaration). Declaring a queue twice with different settings
    is refused.
    """
    definition = QueueDef(
        name, concurrency, worker_concurrency, partition_concurrency, rate_limit, rate_per_key
    )
    existing = core.queues.get(name)
    if existing is not None and existing != definition:
        raise WorkflowDefinitionError(
            f"queue {name!r} is declared twice with different settings: "
            f"{existing.limits()} and {definition.limits()}"
        )
    core.queues[name] = definition
    return definition


async def queues(core: Core) -> list[QueueInfo]:
    """Every known queue by name: its limits, its depth (ready tasks), running and
    waiting tasks, and how long the oldest ready task has been due."""
    return await core.read(core.statements.queues.list())


async def set_queue(
    core: Core,
    name: str,
    *,
    concurrency: Limit = UNSET,
    worker_concurrency: Limit = UNSET,
    partition_concurrency: Limit = UNSET,
    rate_limit: Rate = UNSET,
    rate_per_key: bool | Unset = UNSET,
) -> QueueInfo:
    """Change the limits of queue ``name`` now, for every worker's next claim.

    What ``perdure queues set`` does; the settings are those of
    [`queue`][perdure.App.queue]. Pass None to remove a limit; a setting left out is
    kept. Tasks already running are not stopped when a limit is lowered.
    A worker whose code declares the same setting (``app.queue``) writes
    its value back when it starts.
    """
    definition = QueueDef(
        name, concurrency, worker_concurrency, partition_concurrency, rate_limit, rate_per_key
    )
    if not definition.limits():
        raise ConfigurationError(
            "set_queue needs concurrency, worker_concurrency, partition_concurrency, "
            "rate_limit or rate_per_key"
        )
    await core.run(core.statements.queues.set(definition.name, definition.columns()))
    (info,) = await core.run(core.statements.queues.list(definition.name))
    return info


async def register(core: Core, store: AsyncStore) -> None:
    """Record the declared settings; one statement per queue, so no lock order to keep."""
    for definition in core.queues.values():
        await store.execute(core.statements.queues.set(definition.name, definition.columns()))
