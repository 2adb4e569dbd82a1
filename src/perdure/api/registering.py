"""Recording an App's definitions in the database: workflows, then queues, then schedules.

A worker does this when it starts (its ``before_start``); ``app.register()``
does it now, and ``app.tick_schedules()`` does it before ticking.
"""

from __future__ import annotations

from perdure.api import queues, schedules
from perdure.api.core import Core
from perdure.api.handle import RunHandle
from perdure.engine import schedules as ticking
from perdure.engine import serialization
from perdure.store.store import AsyncStore


async def register(core: Core) -> None:
    """Record this App's workflow definitions and queue settings in the database."""
    await record(core, await core.get_store())


async def record(core: Core, store: AsyncStore) -> None:
    """Record the definitions through ``store`` (the worker's own, when it starts)."""
    for d in core.registry.all().values():
        d.validate()
        await store.execute(
            core.statements.workflows.upsert(
                name=d.name,
                version=d.version,
                queue=d.queue,
                kind=d.kind,
                definition_json=serialization.dumps(d.definition(), "definition"),
                fingerprint=d.fingerprint,
                max_lapses=d.max_lapses,
            )
        )
        if d.kind == "function":
            found = getattr(d, "triggers", ())
            await store.execute(core.statements.emissions.set_triggers(d.name, found))
    await queues.register(core, store)
    await schedules.register(core, store)


async def tick_schedules(core: Core) -> list[RunHandle]:
    """Start the runs of every schedule due now, as a worker's ticker does; their handles.

    Workers do this by themselves; this is for tests (``perdure.testing``)
    and scripts, and with a VirtualClock it ticks at the clock's time. A
    tick already started is not started again. Like a worker's start, it
    first records this App's workflows and schedules, so the workflows of
    a test's own App can be started.
    """
    store = await core.get_store()
    if core.registry.all():
        await record(core, store)
    ticked = await ticking.tick_due(store)
    return [RunHandle(core.owner, s.run_id, created=s.created) for s in ticked.started]
