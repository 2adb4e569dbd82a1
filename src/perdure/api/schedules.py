"""Schedules: cron expressions that start a workflow's runs, once per tick.

Declared in code with ``@app.schedule(...)`` (every worker records them when
it starts, like workflows) or added at run time with ``app.add_schedule(...)``
(recorded at once). Both live in the ``schedules`` table, which every worker
ticks (``perdure.engine.schedules``). Operators pause, resume and trigger
them with ``perdure schedules ...`` or the operations here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from perdure.api.core import Core
from perdure.api.handle import RunHandle
from perdure.api.schedule_def import ScheduleDef, WorkflowRef, checked
from perdure.engine import arguments
from perdure.engine import cron as _cron
from perdure.engine import schedules as ticking
from perdure.errors import (
    InvalidSchedule,
    ScheduleNotFound,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from perdure.store.store import AsyncStore
from perdure.types import ScheduleInfo

F = TypeVar("F", bound=Callable[..., Any])


def declare(
    core: Core,
    cron: str,
    *,
    workflow: WorkflowRef | None = None,
    input: Any = None,
    timezone: str | ZoneInfo = _cron.DEFAULT_TIMEZONE,
    name: str | None = None,
    catchup: str = _cron.DEFAULT_CATCHUP,
    max_catchup: int = _cron.DEFAULT_MAX_CATCHUP,
) -> Callable[[F], F]:
    """Declare a schedule: start ``workflow`` with ``input`` at every tick of ``cron``.

    Decorating a workflow function schedules that workflow::

        @app.schedule("0 9 * * 1-5", timezone="Europe/Paris", input={"team": "ops"})
        @app.workflow("report")
        def report(ctx, input): ...

    or name it: ``app.schedule("*/5 * * * *", workflow="report")``. The cron
    expression is read on the wall clock of ``timezone`` (default UTC);
    five fields, or six with seconds last. ``name`` defaults to the
    workflow's name. ``catchup`` says what to do with ticks missed while
    no worker ran: ``"latest"`` (start the most recent one), ``"all"``
    (every one, at most ``max_catchup``) or ``"skip"``. Every worker
    records the declaration when it starts; the run of a tick reads the
    tick as ``ctx.scheduled_at``. Bad arguments raise at once.
    """
    definition = checked(
        name, cron, workflow, input, timezone, catchup, max_catchup, core.max_payload_bytes
    )
    if workflow is not None:
        core.schedules.append(definition)

    def decorate(fn: F) -> F:
        if workflow is None:
            if not callable(fn):
                raise WorkflowDefinitionError(
                    f"@app.schedule decorates a workflow function, not {fn!r}"
                )
            core.schedules.append(dataclasses.replace(definition, workflow=fn))
        return fn

    return decorate


async def add_schedule(
    core: Core,
    name: str,
    cron: str,
    *,
    workflow: WorkflowRef,
    input: Any = None,
    timezone: str | ZoneInfo = _cron.DEFAULT_TIMEZONE,
    catchup: str = _cron.DEFAULT_CATCHUP,
    max_catchup: int = _cron.DEFAULT_MAX_CATCHUP,
) -> ScheduleInfo:
    """Add (or replace) schedule ``name`` now; every worker ticks it from its next tick.

    Arguments as for [`schedule`][perdure.App.schedule]. The workflow must be defined in
    this App or registered by a worker (UnknownWorkflow otherwise). Adding
    a schedule again replaces its definition; its pause state is kept, and
    its next tick changes only if the cron or the time zone did.
    """
    if name is None:
        raise InvalidSchedule(None, "name", name, "add_schedule needs a name")
    if workflow is None:
        raise InvalidSchedule(name, "workflow", workflow, "add_schedule needs a workflow")
    definition = checked(
        name, cron, workflow, input, timezone, catchup, max_catchup, core.max_payload_bytes
    )
    return await _upsert(core, definition, "api", await core.get_store())


async def _resolve(core: Core, definition: ScheduleDef, store: AsyncStore) -> tuple[str, str]:
    """(schedule name, workflow name); UnknownWorkflow unless the workflow is known."""
    name, workflow = definition.resolve(core.registry)
    if core.registry.get(workflow) is None:
        if await store.execute(core.statements.workflows.lookup(workflow, None)) is None:
            raise UnknownWorkflow(workflow)
    return name, workflow


async def _upsert(
    core: Core, definition: ScheduleDef, source: str, store: AsyncStore
) -> ScheduleInfo:
    name, workflow = await _resolve(core, definition, store)
    now = await store.execute(core.statements.schedules.now())
    info = await store.execute(
        core.statements.schedules.upsert(
            name=name,
            cron=definition.cron.expression,
            timezone=definition.cron.timezone,
            workflow=workflow,
            input_json=definition.input_json,
            catchup=definition.catchup,
            max_catchup=definition.max_catchup,
            source=source,
            next_tick=_cron.next_tick(definition.cron, now),
        )
    )
    return info


async def register(core: Core, store: AsyncStore) -> None:
    """Record the schedules declared in code (after the workflows are registered).

    Every declaration is checked before the first is written.
    """
    names: dict[str, ScheduleDef] = {}
    for definition in core.schedules:
        name, _ = await _resolve(core, definition, store)
        if names.get(name, definition) != definition:
            raise WorkflowDefinitionError(
                f"schedule {name!r} is declared twice: give each schedule its own name="
            )
        names[name] = definition
    for definition in names.values():
        await _upsert(core, definition, "code", store)


async def remove_schedule(core: Core, name: str) -> None:
    """Delete schedule ``name`` (its runs stay); ScheduleNotFound if there is none.

    A schedule declared in code is recorded again by the next worker that
    starts with that code: remove the declaration too.
    """
    if not await core.run(core.statements.schedules.delete(_name(name))):
        raise ScheduleNotFound(name)


async def schedules(core: Core) -> list[ScheduleInfo]:
    """Every schedule with its next tick, last tick and pause state, by name."""
    return await core.read(core.statements.schedules.list())


async def get_schedule(core: Core, name: str) -> ScheduleInfo:
    """Schedule ``name``; ScheduleNotFound if there is none."""
    found = await core.read(core.statements.schedules.list(_name(name)))
    if not found:
        raise ScheduleNotFound(name)
    return found[0]


async def pause_schedule(core: Core, name: str) -> ScheduleInfo:
    """Stop starting runs of schedule ``name`` until it is resumed (runs started go on)."""
    return await _set_paused(core, name, True)


async def resume_schedule(core: Core, name: str) -> ScheduleInfo:
    """Start schedule ``name`` again; the ticks missed meanwhile follow its catchup policy."""
    return await _set_paused(core, name, False)


async def _set_paused(core: Core, name: str, paused: bool) -> ScheduleInfo:
    info = await core.run(core.statements.schedules.set_paused(_name(name), paused))
    if info is None:
        raise ScheduleNotFound(name)
    return info


async def trigger_schedule(core: Core, name: str) -> RunHandle:
    """Start one run of schedule ``name`` now (``scheduled_at`` is now); ticks are unchanged."""
    started = await ticking.trigger(await core.get_store(), _name(name))
    if started is None:
        raise ScheduleNotFound(name)
    return RunHandle(core.owner, started.run_id)


async def upcoming_ticks(core: Core, name: str, count: int = 5) -> list[datetime]:
    """The next ``count`` ticks of schedule ``name``, from its next tick on, in UTC."""
    arguments.integer("count", count, minimum=1, maximum=1000)
    info = await get_schedule(core, name)
    parsed = _cron.parse(info.cron, info.timezone, info.name)
    return [info.next_tick, *_cron.ticks(parsed, info.next_tick, count - 1)]


def _name(name: object) -> str:
    try:
        return arguments.validate_name("schedule", name)
    except WorkflowDefinitionError:
        raise ScheduleNotFound(repr(name)) from None
