"""Schedules: cron expressions that start a workflow's runs, once per tick.

Declared in code with ``@app.schedule(...)`` (every worker records them when
it starts, like workflows) or added at run time with ``app.add_schedule(...)``
(recorded at once). Both live in the ``schedules`` table, which every worker
ticks (:mod:`perdure.engine.schedules`). Operators pause, resume and trigger
them with ``perdure schedules ...`` or the methods here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

from perdure.api.handle import RunHandle
from perdure.api.portal import Portal
from perdure.api.registry import Registry
from perdure.engine import arguments, serialization
from perdure.engine import cron as _cron
from perdure.engine import schedules as ticking
from perdure.errors import (
    InvalidSchedule,
    ScheduleNotFound,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore
from perdure.types import ScheduleInfo

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: What a schedule's workflow is given as: a name, or the decorated workflow function.
WorkflowRef = str | Callable[..., Any]


@dataclass(frozen=True)
class ScheduleDef:
    """One schedule as code states it; the workflow (and a default name) resolve at registration."""

    name: str | None
    cron: _cron.Cron
    #: None only until ``@app.schedule`` is applied to the workflow function.
    workflow: WorkflowRef | None
    input_json: str
    catchup: str
    max_catchup: int

    def resolve(self, registry: Registry) -> tuple[str, str]:
        """(schedule name, workflow name): a workflow function is looked up in ``registry``."""
        workflow = self.workflow
        if workflow is None:
            raise WorkflowDefinitionError(f"schedule {self.name!r} names no workflow")
        if not isinstance(workflow, str):
            found = registry.by_function(workflow)
            if found is None:
                raise UnknownWorkflow(getattr(workflow, "__name__", repr(workflow)))
            workflow = found.name
        return self.name or workflow, workflow


def _checked(
    name: str | None,
    expression: object,
    workflow: WorkflowRef | None,
    input: Any,
    timezone: object,
    catchup: object,
    max_catchup: object,
    max_payload_bytes: int,
) -> ScheduleDef:
    """Every argument of a schedule checked, before anything is written."""
    if name is not None:
        try:
            arguments.validate_name("schedule", name)
        except WorkflowDefinitionError as exc:
            raise InvalidSchedule(None, "name", name, str(exc)) from None
    parsed = _cron.parse(expression, timezone, name)
    if catchup not in _cron.CATCHUP_POLICIES:
        raise InvalidSchedule(
            name, "catchup", catchup, f"use one of {', '.join(_cron.CATCHUP_POLICIES)}"
        )
    if (
        not isinstance(max_catchup, int)
        or isinstance(max_catchup, bool)
        or not 1 <= max_catchup <= 10_000
    ):
        raise InvalidSchedule(name, "max_catchup", max_catchup, "an integer from 1 to 10000")
    if isinstance(workflow, str):
        arguments.validate_name("workflow", workflow)
    elif workflow is not None and not callable(workflow):
        raise UnknownWorkflow(repr(workflow))
    what = f"the input of schedule {name or workflow!r}"
    text = serialization.dumps(input, what, max_payload_bytes)
    return ScheduleDef(name, parsed, workflow, text, str(catchup), max_catchup)


class SchedulesMixin:
    """The App's operations on schedules: declare, add, remove, list, pause, resume, trigger."""

    if TYPE_CHECKING:
        _portal: Portal
        statements: Statements
        registry: Registry
        max_payload_bytes: int
        _schedule_defs: list[ScheduleDef]

        async def _run(self, stmt: Statement[T]) -> T: ...
        async def _get_store(self) -> AsyncStore: ...
        async def _register(self, store: AsyncStore | None = None) -> None: ...

    def schedule(
        self,
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
        checked = _checked(
            name, cron, workflow, input, timezone, catchup, max_catchup, self.max_payload_bytes
        )
        if workflow is not None:
            self._schedule_defs.append(checked)

        def decorate(fn: F) -> F:
            if workflow is None:
                if not callable(fn):
                    raise WorkflowDefinitionError(
                        f"@app.schedule decorates a workflow function, not {fn!r}"
                    )
                self._schedule_defs.append(dataclasses.replace(checked, workflow=fn))
            return fn

        return decorate

    def add_schedule(
        self,
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

        Arguments as for :meth:`schedule`. The workflow must be defined in
        this App or registered by a worker (UnknownWorkflow otherwise). Adding
        a schedule again replaces its definition; its pause state is kept, and
        its next tick changes only if the cron or the time zone did.
        """
        if name is None:
            raise InvalidSchedule(None, "name", name, "add_schedule needs a name")
        if workflow is None:
            raise InvalidSchedule(name, "workflow", workflow, "add_schedule needs a workflow")
        checked = _checked(
            name, cron, workflow, input, timezone, catchup, max_catchup, self.max_payload_bytes
        )
        return self._portal.call(self._upsert(checked, "api"))

    async def _resolve(self, definition: ScheduleDef, store: AsyncStore) -> tuple[str, str]:
        """(schedule name, workflow name); UnknownWorkflow unless the workflow is known."""
        name, workflow = definition.resolve(self.registry)
        if self.registry.get(workflow) is None:
            if await store.execute(self.statements.workflows.lookup(workflow, None)) is None:
                raise UnknownWorkflow(workflow)
        return name, workflow

    async def _upsert(
        self, definition: ScheduleDef, source: str, store: AsyncStore | None = None
    ) -> ScheduleInfo:
        target = store or await self._get_store()
        name, workflow = await self._resolve(definition, target)
        now = await target.execute(self.statements.schedules.now())
        info = await target.execute(
            self.statements.schedules.upsert(
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
        assert info is not None  # the upsert returns the row, changed or not
        return info

    async def _register_schedules(self, store: AsyncStore) -> None:
        """Record the schedules declared in code (after the workflows are registered).

        Every declaration is checked before the first is written.
        """
        names: dict[str, ScheduleDef] = {}
        for definition in self._schedule_defs:
            name, _ = await self._resolve(definition, store)
            if names.get(name, definition) != definition:
                raise WorkflowDefinitionError(
                    f"schedule {name!r} is declared twice: give each schedule its own name="
                )
            names[name] = definition
        for definition in names.values():
            await self._upsert(definition, "code", store)

    def remove_schedule(self, name: str) -> None:
        """Delete schedule ``name`` (its runs stay); ScheduleNotFound if there is none.

        A schedule declared in code is recorded again by the next worker that
        starts with that code: remove the declaration too.
        """
        if not self._portal.call(self._run(self.statements.schedules.delete(_name(name)))):
            raise ScheduleNotFound(name)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule with its next tick, last tick and pause state, by name."""
        return self._portal.call(self._run(self.statements.schedules.list()))

    def get_schedule(self, name: str) -> ScheduleInfo:
        """Schedule ``name``; ScheduleNotFound if there is none."""
        found = self._portal.call(self._run(self.statements.schedules.list(_name(name))))
        if not found:
            raise ScheduleNotFound(name)
        return found[0]

    def pause_schedule(self, name: str) -> ScheduleInfo:
        """Stop starting runs of schedule ``name`` until it is resumed (runs started go on)."""
        return self._set_paused(name, True)

    def resume_schedule(self, name: str) -> ScheduleInfo:
        """Start schedule ``name`` again; the ticks missed meanwhile follow its catchup policy."""
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> ScheduleInfo:
        info = self._portal.call(
            self._run(self.statements.schedules.set_paused(_name(name), paused))
        )
        if info is None:
            raise ScheduleNotFound(name)
        return info

    def trigger_schedule(self, name: str) -> RunHandle:
        """Start one run of schedule ``name`` now (``scheduled_at`` is now); ticks are unchanged."""
        started = self._portal.call(self._trigger(_name(name)))
        if started is None:
            raise ScheduleNotFound(name)
        return RunHandle(self, started.run_id)  # type: ignore[arg-type]  # self is an App

    async def _trigger(self, name: str) -> ticking.Started | None:
        return await ticking.trigger(await self._get_store(), name)

    def tick_schedules(self) -> list[RunHandle]:
        """Start the runs of every schedule due now, as a worker's ticker does; their handles.

        Workers do this by themselves; this is for tests (``perdure.testing``)
        and scripts, and with a VirtualClock it ticks at the clock's time. A
        tick already started is not started again. Like a worker's start, it
        first records this App's workflows and schedules, so the workflows of
        a test's own App can be started.
        """
        ticked = self._portal.call(self._tick_schedules())
        return [
            RunHandle(self, s.run_id, created=s.created)  # type: ignore[arg-type]
            for s in ticked.started
        ]

    async def _tick_schedules(self) -> ticking.Ticked:
        store = await self._get_store()
        if self.registry.all():
            await self._register(store)
        return await ticking.tick_due(store)

    def upcoming_ticks(self, name: str, count: int = 5) -> list[datetime]:
        """The next ``count`` ticks of schedule ``name``, from its next tick on, in UTC."""
        arguments.integer("count", count, minimum=1, maximum=1000)
        info = self.get_schedule(name)
        parsed = _cron.parse(info.cron, info.timezone, info.name)
        return [info.next_tick, *_cron.ticks(parsed, info.next_tick, count - 1)]


def _name(name: object) -> str:
    try:
        return arguments.validate_name("schedule", name)
    except WorkflowDefinitionError:
        raise ScheduleNotFound(repr(name)) from None
