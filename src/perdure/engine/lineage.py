"""Which checkpoints a fork copies: "the steps before N", for both workflow shapes.

A fork is a new run of the original's workflow version, with its input, whose
checkpoints "before N" are copied from the original so that replay returns
them instead of executing the steps again. What "before" means depends on the
shape:

* **Function workflows** execute their steps in one order, recorded as
  positions. The steps before N are those at positions lower than N's (the
  first step of that name, or the position given). N and everything after it
  execute again. One exception: a child run started before N that has not
  finished is not shared, since it would wake the original run, not the fork;
  the fork starts a child of its own there.
* **Graph workflows** run steps in parallel, so position says little. The
  steps before N are the steps that are not downstream of N: neither N nor
  any step that depends on it, directly or through others. Those that
  completed (or were skipped by their condition) are copied; N and its
  downstream steps run again, fed the copied outputs of their dependencies.

Only final checkpoints are copied (completed, failed, timed-out waits,
skipped): a step still retrying or waiting in the original starts afresh.
This module is pure: it decides from rows already read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from perdure.errors import UnknownStep
from perdure.types import Step, StepStatus

#: Checkpoints a function workflow's fork copies: every final one.
_FUNCTION_COPIED = (
    StepStatus.COMPLETED,
    StepStatus.FAILED,
    StepStatus.TIMED_OUT,
    StepStatus.SKIPPED,
)
#: Checkpoints a graph workflow's fork copies: a failed step runs again.
_GRAPH_COPIED = (StepStatus.COMPLETED, StepStatus.SKIPPED)


def _child_run(step: Step) -> str | None:
    output = step.output if step.kind == "child" else None
    return str(output["run_id"]) if isinstance(output, dict) and "run_id" in output else None


def child_runs(steps: Sequence[Step]) -> list[str]:
    """The ids of the child runs a function workflow's checkpoints started."""
    return [run for run in map(_child_run, steps) if run is not None]


def function_fork(
    run_id: str,
    steps: Sequence[Step],
    from_step: str | int,
    finished_children: Collection[str] = (),
) -> tuple[str, list[int]]:
    """The fork point's step name, and the positions a fork of a function run copies.

    ``from_step`` is a recorded step's name (its first occurrence) or position.
    ``finished_children`` are the ids of child runs that have finished.
    UnknownStep when the original recorded no such step.
    """
    found = [
        s
        for s in steps
        if (s.position == from_step if isinstance(from_step, int) else s.name == from_step)
    ]
    if not found:
        raise UnknownStep(run_id, from_step, _unique(s.name for s in steps))
    point = found[0]
    copied = [
        s.position
        for s in steps
        if s.position < point.position
        and s.status in _FUNCTION_COPIED
        and (_child_run(s) is None or _child_run(s) in finished_children)
    ]
    return point.name, copied


def graph_fork(
    run_id: str, definition: Mapping[str, Any], steps: Sequence[Step], from_step: str | int
) -> tuple[str, list[int]]:
    """The fork point's step name, and the positions a fork of a graph run copies.

    ``definition`` is the graph as the workflow registry records it (its
    ``steps``, each with ``name``, ``position`` and ``depends_on``).
    ``from_step`` is a step's name or position. UnknownStep when the graph has
    no such step.
    """
    nodes = list(definition.get("steps", []))
    names = [str(node["name"]) for node in nodes]
    by_position = {int(node["position"]): str(node["name"]) for node in nodes}
    name = by_position.get(from_step) if isinstance(from_step, int) else from_step
    if name not in names:
        raise UnknownStep(run_id, from_step, names)
    dependents: dict[str, list[str]] = {n: [] for n in names}
    for node in nodes:
        for dependency in node.get("depends_on", []):
            dependents.setdefault(str(dependency), []).append(str(node["name"]))
    downstream, frontier = {name}, [name]
    while frontier:
        for child in dependents.get(frontier.pop(), []):
            if child not in downstream:
                downstream.add(child)
                frontier.append(child)
    copied = [
        s.position
        for s in steps
        if s.position < len(nodes) and s.name not in downstream and s.status in _GRAPH_COPIED
    ]
    return name, copied


def _unique(names: Any) -> list[str]:
    return list(dict.fromkeys(names))
