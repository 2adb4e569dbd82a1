"""Graph workflows: ``app.graph(...)`` and its ``@graph.step(...)`` decorator.

A graph is a DAG of steps. Each step is ``fn(ctx, input)`` where ``ctx`` is a
[`StepContext`][perdure.StepContext] and ``input`` is the run's input (a step with no
dependencies), its one dependency's output, or a dict of its dependencies'
outputs by step name. The graph is checked as it is written (duplicate names,
dependencies on functions that are not steps of this graph) and again, whole,
before its first run or worker (unknown names, cycles): a bad graph is refused
before anything is written.
"""

from __future__ import annotations

import hashlib
import heapq
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from perdure.api.registry import DEFAULT_MAX_LAPSES, validate_identity, validate_max_lapses
from perdure.engine import arguments, typed
from perdure.engine.arguments import validate_name
from perdure.engine.retry import DEFAULT_WORKFLOW_RETRY, RetryPolicy, check_policy
from perdure.errors import ConfigurationError, WorkflowDefinitionError

F = TypeVar("F", bound=Callable[..., Any])

JOINS = ("all", "any")


@dataclass
class GraphStep:
    """One step of a graph: its code, its dependencies and its settings."""

    name: str
    fn: Callable[..., Any]
    after: tuple[str, ...]
    when: Callable[[Any], Any] | None = None
    compensate: Callable[..., Any] | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    signal: str | None = None
    signal_timeout: float | None = None
    join: str = "all"
    #: Set when the graph is checked: a topological position, dependencies by position.
    position: int = -1
    depends_on: tuple[int, ...] = ()

    def describe(self) -> dict[str, Any]:
        """The step as stored in the workflow registry (for SQL and the dashboard)."""
        return {
            "name": self.name,
            "position": self.position,
            "depends_on": list(self.after),
            "join": self.join,
            "when": _source_line(self.when),
            "compensate": getattr(self.compensate, "__name__", None),
            "retry": None if self.retry is None else self.retry.describe(),
            "timeout": self.timeout,
            "signal": self.signal,
            "signal_timeout": self.signal_timeout,
        }


def _source_line(fn: Callable[..., Any] | None) -> str | None:
    if fn is None:
        return None
    try:
        return inspect.getsource(fn).strip()[:200]
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


@dataclass
class Graph:
    """A graph workflow; define its steps with ``step``."""

    name: str
    version: int
    queue: str
    retry: RetryPolicy = field(default=DEFAULT_WORKFLOW_RETRY)
    kind: str = "graph"
    #: Lease lapses a task of this graph's runs survives before the reaper
    #: reaps it for good (stored with the definition; every worker applies it).
    max_lapses: int = DEFAULT_MAX_LAPSES
    _steps: dict[str, GraphStep] = field(default_factory=dict)
    _by_fn: dict[int, str] = field(default_factory=dict)
    _ordered: list[GraphStep] | None = None

    def __post_init__(self) -> None:
        validate_identity("graph", self.name, self.version, self.queue)
        validate_max_lapses("graph", self.name, self.max_lapses)

    def step(
        self,
        name: str | None = None,
        *,
        depends_on: Iterable[Callable[..., Any] | str] = (),
        when: Callable[[Any], Any] | None = None,
        compensate: Callable[..., Any] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        wait_for_signal: str | None = None,
        signal_timeout: float | None = None,
        join: str = "all",
    ) -> Callable[[F], F]:
        """Decorate ``fn(ctx, input)`` as a step of this graph.

        ``depends_on``: steps (their functions or names) whose outputs this one
        needs. ``when``: called with the step's input; a false answer skips the
        step, and the steps that depend on it. ``join``: 'all' (default) skips
        the step if any dependency was skipped, 'any' runs it if at least one
        completed (it then gets only the completed ones' outputs). ``compensate``:
        ``undo(ctx, output)``, run if the run fails after this step completed.
        ``wait_for_signal``: an approval gate; the step runs once that signal
        arrives, with its payload in ``ctx.signal`` (``signal_timeout`` seconds
        at most, then the step fails). ``retry``, ``timeout``: as for ctx.step.
        """
        where = f"graph {self.name!r}: step {name!r}"
        if isinstance(depends_on, str) or callable(depends_on):
            deps: tuple[Any, ...] = (depends_on,)
        else:
            try:
                deps = tuple(depends_on)
            except TypeError:
                raise WorkflowDefinitionError(
                    f"{where}: depends_on takes steps or step names, not {depends_on!r}"
                ) from None
        try:
            check_policy("retry", retry)
        except ConfigurationError as exc:
            raise WorkflowDefinitionError(f"{where}: {exc}") from None

        def register(fn: F) -> F:
            if not callable(fn):
                raise WorkflowDefinitionError(
                    f"{where}: @graph.step decorates a function, not {fn!r}"
                )
            step_name = validate_name(
                "step", getattr(fn, "__name__", None) if name is None else name
            )
            self._add(
                GraphStep(
                    name=step_name,
                    fn=fn,
                    after=tuple(self._dependency_name(step_name, d) for d in deps),
                    when=when,
                    compensate=compensate,
                    retry=retry,
                    timeout=timeout,
                    signal=wait_for_signal,
                    signal_timeout=signal_timeout,
                    join=join,
                )
            )
            return fn

        return register

    def _dependency_name(self, step: str, dep: Callable[..., Any] | str) -> str:
        if isinstance(dep, str):
            return dep
        found = self._by_fn.get(id(dep)) if callable(dep) else None
        if found is None:
            raise WorkflowDefinitionError(
                f"graph {self.name!r}: step {step!r} depends on {dep!r}, which is not a step "
                "of this graph (decorate it with @graph.step() first, or name it)"
            )
        return found

    def _add(self, step: GraphStep) -> None:
        where = f"graph {self.name!r}: step {step.name!r}"
        if step.name in self._steps:
            raise WorkflowDefinitionError(f"{where} is defined twice")
        for fn, what in ((step.fn, "the step"), (step.compensate, "compensate=")):
            if fn is not None and not _takes_two(fn):
                raise WorkflowDefinitionError(f"{where}: {what} must take (ctx, input)")
        for attr in ("when", "compensate"):
            value = getattr(step, attr)
            if value is not None and not callable(value):
                raise WorkflowDefinitionError(f"{where}: {attr}= must be callable")
        if step.join not in JOINS:
            raise WorkflowDefinitionError(
                f"{where}: join must be 'all' or 'any', not {step.join!r}"
            )
        if step.signal is not None:
            validate_name("signal", step.signal)
        for seconds, what in ((step.timeout, "timeout"), (step.signal_timeout, "signal_timeout")):
            try:
                arguments.optional_seconds(what, seconds, positive=True)
            except ConfigurationError as exc:
                raise WorkflowDefinitionError(f"{where}: {exc}") from None
        if len(set(step.after)) != len(step.after):
            raise WorkflowDefinitionError(f"{where} lists a dependency twice")
        if step.name in step.after:
            raise WorkflowDefinitionError(f"{where} depends on itself")
        self._steps[step.name] = step
        self._by_fn.setdefault(id(step.fn), step.name)
        self._ordered = None

    # Checking ------------------------------------------------------------------

    def validate(self) -> None:
        """Check the whole graph: known dependencies, no cycle; fix the positions.

        Raises WorkflowDefinitionError naming the problem. Called before the
        graph's first run or worker; call it yourself to fail at import time.
        """
        self._validated()

    def _validated(self) -> list[GraphStep]:
        """The steps in topological order, checked and positioned the first time."""
        if self._ordered is not None:
            return self._ordered
        if not self._steps:
            raise WorkflowDefinitionError(f"graph {self.name!r} has no steps")
        order = list(self._steps)
        for step in self._steps.values():
            for dep in step.after:
                if dep not in self._steps:
                    raise WorkflowDefinitionError(
                        f"graph {self.name!r}: step {step.name!r} depends on unknown step "
                        f"{dep!r} (known: {', '.join(order)})"
                    )
        # Kahn's algorithm, ties broken by definition order: the same code
        # always gives the same positions.
        waiting = {name: len(step.after) for name, step in self._steps.items()}
        dependents: dict[str, list[str]] = {name: [] for name in self._steps}
        for step in self._steps.values():
            for dep in step.after:
                dependents[dep].append(step.name)
        ready = [order.index(n) for n, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        ordered: list[GraphStep] = []
        while ready:
            step = self._steps[order[heapq.heappop(ready)]]
            step.position = len(ordered)
            ordered.append(step)
            for child in dependents[step.name]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, order.index(child))
        if len(ordered) != len(self._steps):
            cyclic = sorted(name for name, count in waiting.items() if count > 0)
            raise WorkflowDefinitionError(
                f"graph {self.name!r} has a cycle through steps {', '.join(cyclic)}"
            )
        for step in ordered:
            step.depends_on = tuple(self._steps[d].position for d in step.after)
        self._ordered = ordered
        return ordered

    # What the engine reads -------------------------------------------------------

    @property
    def steps(self) -> list[GraphStep]:
        """The steps in topological order (position order)."""
        return self._validated()

    def step_input(self, step: Any, outputs: dict[int, Any], run_input: Any) -> Any:
        """What ``step`` receives: the run input, its one dependency's output, or a dict.

        Each value is rebuilt as its annotation declares: the run input as the
        step's input parameter, an output as its step's return annotation.
        """
        if not step.depends_on:
            return typed.param_hint(step.fn, 1).rebuild(run_input, f"the input of {self.name!r}")
        if len(step.depends_on) == 1:
            return self._output(step.depends_on[0], outputs)
        return {
            self.steps[d].name: self._output(d, outputs) for d in step.depends_on if d in outputs
        }

    def _output(self, position: int, outputs: dict[int, Any]) -> Any:
        return _rebuilt(self.steps[position], outputs[position]) if position in outputs else None

    def check_input(self, value: Any) -> Any:
        """``value`` validated against each first step's input annotation (InvalidPayload)."""
        for step in self.steps:
            hint = typed.param_hint(step.fn, 1)
            if not step.depends_on and hint.typed:
                value = hint.rebuild(value, f"the input of graph {self.name!r}")
        return value

    def rebuild_result(self, output: Any) -> Any:
        """The run's result (the last steps' outputs by name), each value rebuilt."""
        if not isinstance(output, dict):
            return output
        steps = {step.name: step for step in self.steps}
        return {
            name: _rebuilt(steps[name], value) if name in steps else value
            for name, value in output.items()
        }

    def sinks(self) -> list[GraphStep]:
        """The steps nothing depends on: the run's output is theirs, by name."""
        needed = {d for step in self.steps for d in step.depends_on}
        return [step for step in self.steps if step.position not in needed]

    def definition(self) -> dict[str, Any]:
        """The graph as stored in the registry: steps, edges, settings."""
        return {
            "steps": [step.describe() for step in self.steps],
            "edges": [[dep, step.name] for step in self.steps for dep in step.after],
        }

    @property
    def fingerprint(self) -> str:
        """A hash of the graph's shape and of every step's source code."""
        digest = hashlib.sha256(json.dumps(self.definition(), sort_keys=True).encode())
        for step in self.steps:
            for fn in (step.fn, step.when, step.compensate):
                if fn is not None:
                    digest.update(_source(fn))
        return digest.hexdigest()[:16]

    async def invoke(self, execution: Any, input: Any) -> Any:
        """Graph runs are executed step by step by the engine, never invoked whole."""
        raise WorkflowDefinitionError(f"graph {self.name!r} cannot be invoked as a function")


def _rebuilt(step: GraphStep, value: Any) -> Any:
    """A step's recorded output as its function's return annotation declares it."""
    return typed.return_hint(step.fn).rebuild(value, f"the output of step {step.name!r}")


def _takes_two(fn: Any) -> bool:
    if not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    return len(required) <= 2 and (len(positional) >= 2 or varargs)


def _source(fn: Callable[..., Any]) -> bytes:
    try:
        return inspect.getsource(fn).encode()
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn)).encode()
