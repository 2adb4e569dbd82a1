"""Workflow definitions: the ``@app.workflow`` decorator's records."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from perdure.engine import nondeterminism, typed
from perdure.engine.arguments import INT32_MAX, validate_name
from perdure.engine.retry import DEFAULT_WORKFLOW_RETRY, RetryPolicy
from perdure.errors import UnknownWorkflow, WorkflowDefinitionError
from perdure.types import EventTrigger

if TYPE_CHECKING:
    from perdure.engine.executor import Execution


def validate_identity(kind: str, name: object, version: object, queue: object) -> None:
    """Refuse a bad workflow name, version (an integer from 1 to 2**31 - 1) or queue name."""
    validate_name("workflow", name)
    validate_name("queue", queue)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= INT32_MAX:
        raise WorkflowDefinitionError(
            f"{kind} {name!r}: version must be an integer from 1 to {INT32_MAX}, not {version!r}"
        )


#: Lease lapses a task survives before the reaper reaps it for good, with its run.
DEFAULT_MAX_LAPSES = 5


def validate_max_lapses(kind: str, name: str, max_lapses: object) -> None:
    """Refuse a ``max_lapses`` that is not an integer from 1 to 1000."""
    if (
        not isinstance(max_lapses, int)
        or isinstance(max_lapses, bool)
        or not 1 <= max_lapses <= 1000
    ):
        raise WorkflowDefinitionError(
            f"{kind} {name!r}: max_lapses must be an integer from 1 to 1000, not {max_lapses!r}"
        )


def _trigger_record(trigger: EventTrigger) -> dict[str, Any]:
    """What the workflow registry records of one event trigger (its batching if any)."""
    recorded: dict[str, Any] = {"name": trigger.name, "match": trigger.match}
    if trigger.batched:
        recorded["batch_size"] = trigger.batch_size
        recorded["batch_window"] = trigger.batch_window
    return recorded


@dataclass
class WorkflowDef:
    """A function workflow: its name, version, queue, retry policy and code."""

    name: str
    version: int
    queue: str
    fn: Callable[..., Any]
    retry: RetryPolicy = field(default=DEFAULT_WORKFLOW_RETRY)
    kind: str = "function"
    #: Lease lapses a task of this workflow's runs survives before the reaper
    #: reaps it for good (stored with the definition; every worker applies it).
    max_lapses: int = DEFAULT_MAX_LAPSES
    #: Its update handlers by name (the registry's, shared by every version).
    updates: dict[str, Any] = field(default_factory=dict)
    #: The emitted events that start a run of it (``on_event``).
    triggers: tuple[EventTrigger, ...] = ()

    def __post_init__(self) -> None:
        validate_identity("workflow", self.name, self.version, self.queue)
        validate_max_lapses("workflow", self.name, self.max_lapses)
        params = list(inspect.signature(self.fn).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if not positional or len(positional) > 2:
            raise WorkflowDefinitionError(
                f"workflow {self.name!r}: the function must take (ctx) or (ctx, input)"
            )
        self.takes_input = len(positional) == 2
        self.is_async = inspect.iscoroutinefunction(self.fn)
        #: The input and result annotations: a model or dataclass is rebuilt from JSON.
        self.input_hint = typed.param_hint(self.fn, 1) if self.takes_input else typed.UNTYPED
        self.result_hint = typed.return_hint(self.fn)

    @property
    def fingerprint(self) -> str:
        """A hash of the workflow's source code, to tell deployed versions apart."""
        try:
            source = inspect.getsource(self.fn)
        except (OSError, TypeError):
            source = self.fn.__qualname__
        return hashlib.sha256(source.encode()).hexdigest()[:16]

    def validate(self) -> None:
        """Nothing more to check: a function workflow is checked when it is defined."""

    def definition(self) -> dict[str, Any]:
        """What the workflow registry records of a function workflow."""
        recorded: dict[str, Any] = {"takes_input": self.takes_input, "async": self.is_async}
        if self.triggers:
            recorded["on_event"] = [_trigger_record(t) for t in self.triggers]
        return recorded

    def check_input(self, value: Any) -> Any:
        """``value`` as the workflow's input annotation declares it (InvalidPayload if not)."""
        return self.input_hint.rebuild(value, f"the input of workflow {self.name!r}")

    def rebuild_result(self, output: Any) -> Any:
        """A recorded result as the workflow's return annotation declares it."""
        return self.result_hint.rebuild(output, f"the result of workflow {self.name!r}")

    async def invoke(self, execution: Execution, input: Any) -> Any:
        """Run the workflow body (on the loop if async, else on a worker thread) with
        ``input`` rebuilt as its annotation declares."""
        # Imported here: a program that only reads runs (the CLI) never loads the engine.
        from perdure.api.context import Context, SyncContext

        args: tuple[Any, ...] = (self.check_input(input),) if self.takes_input else ()
        if self.updates:
            from perdure.api.update_defs import WorkflowUpdates

            execution.update_handlers = WorkflowUpdates(self.updates)
        watch = None
        if execution.env.detect_nondeterminism:
            watch = nondeterminism.Watch(execution.task.run_id, self.name)
        if self.is_async:
            body = self.fn(Context(execution), *args)
            return await (body if watch is None else watch.run(body))
        loop = asyncio.get_running_loop()

        def blocking() -> Any:
            return self.fn(SyncContext(execution), *args)

        return await loop.run_in_executor(
            execution.env.threads, blocking if watch is None else lambda: watch.call(blocking)
        )


class Definition(Protocol):
    """A workflow of either shape, as the registry and the App see it."""

    name: str
    version: int
    queue: str
    kind: str
    max_lapses: int

    @property
    def fingerprint(self) -> str:
        """A hash of the definition's code."""

    def validate(self) -> None:
        """Refuse a definition that cannot run (WorkflowDefinitionError)."""

    def definition(self) -> dict[str, Any]:
        """What the workflow registry table records of it."""

    def check_input(self, value: Any) -> Any:
        """``value`` validated against the declared input type (InvalidPayload if not)."""

    def rebuild_result(self, output: Any) -> Any:
        """A recorded result rebuilt as the declared result type."""


class Registry:
    """The workflows one App defines, by name and version."""

    def __init__(self) -> None:
        """An empty registry."""
        self._defs: dict[tuple[str, int], Any] = {}
        #: Update handlers by workflow name, then update name (every version's).
        self.updates: dict[str, dict[str, Any]] = {}

    def add(self, definition: Any) -> None:
        """Register ``definition``; a second definition of one name and version is refused."""
        key = (definition.name, definition.version)
        existing = self._defs.get(key)
        same = existing is definition or (
            existing is not None and getattr(existing, "fn", None) is getattr(definition, "fn", 1)
        )
        if existing is not None and not same:
            raise WorkflowDefinitionError(
                f"workflow {definition.name!r} version {definition.version} is defined twice"
            )
        self._defs[key] = definition
        if isinstance(definition, WorkflowDef):
            definition.updates = self.updates.setdefault(definition.name, {})

    def add_update(self, handler: Any) -> None:
        """Register update handler ``handler`` of its workflow (every version of it);
        a second handler of one name is refused."""
        handlers = self.updates.setdefault(handler.workflow, {})
        existing = handlers.get(handler.name)
        if existing is not None and existing.fn is not handler.fn:
            raise WorkflowDefinitionError(
                f"update {handler.name!r} of workflow {handler.workflow!r} is defined twice"
            )
        handlers[handler.name] = handler

    def get(self, name: str, version: int | None = None) -> Any:
        """The definition of ``name`` at ``version``, or its newest version."""
        if version is not None:
            return self._defs.get((name, version))
        found = [d for (n, _), d in self._defs.items() if n == name]
        return max(found, key=lambda d: d.version) if found else None

    def require(self, name: str, version: int | None = None) -> Any:
        """Like ``get``, but raise UnknownWorkflow when missing."""
        found = self.get(name, version)
        if found is None:
            raise UnknownWorkflow(name, version)
        return found

    def by_function(self, fn: Callable[..., Any]) -> WorkflowDef | None:
        """The newest definition whose code is ``fn``."""
        found = [d for d in self._defs.values() if getattr(d, "fn", None) is fn]
        return max(found, key=lambda d: d.version) if found else None

    def all(self) -> dict[tuple[str, int], Any]:
        """Every definition, keyed by (name, version)."""
        return dict(self._defs)
