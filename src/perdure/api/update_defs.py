"""Update handlers: what ``@app.update_handler`` records, and how a run applies them.

A handler is ``async def handler(ctx, payload)`` (or ``(ctx)``) declared for a
workflow by name; ``@handler.validator`` adds a plain ``def validator(payload)``
that raises to refuse a request. The engine (engine/updates.py) asks
``WorkflowUpdates`` whether to refuse a request and to apply an accepted one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perdure.engine import typed
from perdure.engine.arguments import validate_name
from perdure.errors import PerdureError, WorkflowDefinitionError

if TYPE_CHECKING:
    from perdure.engine.executor import Execution


@dataclass
class UpdateHandler:
    """One update handler of a workflow: its name, code and optional validator."""

    workflow: str
    name: str
    fn: Callable[..., Any]
    check: Callable[[Any], Any] | None = field(default=None)

    def __post_init__(self) -> None:
        validate_name("workflow", self.workflow)
        validate_name("update", self.name)
        if not inspect.iscoroutinefunction(self.fn):
            raise WorkflowDefinitionError(
                f"update {self.name!r} of workflow {self.workflow!r}: the handler must be an "
                "async def taking (ctx) or (ctx, payload)"
            )
        params = [
            p
            for p in inspect.signature(self.fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if not params or len(params) > 2:
            raise WorkflowDefinitionError(
                f"update {self.name!r} of workflow {self.workflow!r}: the handler must take "
                "(ctx) or (ctx, payload)"
            )
        self.takes_payload = len(params) == 2
        self.payload_hint = typed.param_hint(self.fn, 1) if self.takes_payload else typed.UNTYPED

    def validator(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Decorate ``def validator(payload)``: raising refuses the request, and then
        nothing of it is recorded in the run."""
        if not callable(fn) or inspect.iscoroutinefunction(fn):
            raise WorkflowDefinitionError(
                f"the validator of update {self.name!r} must be a plain def taking (payload)"
            )
        self.check = fn
        return fn

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the handler's function directly (as in a unit test)."""
        return await self.fn(*args, **kwargs)


class WorkflowUpdates:
    """The update handlers of one workflow, as the engine asks for them."""

    def __init__(self, handlers: dict[str, UpdateHandler]) -> None:
        """The handlers, by update name (shared with the registry: later ones count)."""
        self.handlers = handlers

    def refusal(self, name: str, payload: Any) -> str | None:
        """Why the request is refused (no handler, a bad payload, its validator raised),
        or None to accept it."""
        handler = self.handlers.get(name)
        if handler is None:
            return f"the workflow has no update handler {name!r}"
        try:
            value = handler.payload_hint.rebuild(payload, f"the payload of update {name!r}")
            if handler.check is not None:
                handler.check(value)
        except PerdureError as exc:
            return str(exc)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    async def apply(self, execution: Execution, name: str, payload: Any) -> Any:
        """Run the handler of ``name`` with ``payload`` on the run's own context."""
        # Imported here, as WorkflowDef.invoke does: the context needs the engine.
        from perdure.api.context import Context

        handler = self.handlers[name]
        if not handler.takes_payload:
            return await handler.fn(Context(execution))
        value = handler.payload_hint.rebuild(payload, f"the payload of update {name!r}")
        return await handler.fn(Context(execution), value)
