"""A schedule as code states it, every argument checked before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perdure.api.registry import Registry
from perdure.engine import arguments, serialization
from perdure.engine import cron as _cron
from perdure.errors import (
    InvalidSchedule,
    UnknownWorkflow,
    WorkflowDefinitionError,
)

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


def checked(
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
