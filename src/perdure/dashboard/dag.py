"""A graph workflow drawn as a DAG: columns by dependency depth, nodes coloured by status.

The layout comes from the definition the registry stores (``workflows.definition``:
each step's name, topological position and dependencies). A step's column
is its depth (the longest chain of dependencies before it); within a column,
steps keep their topological order. The page draws the result as SVG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perdure.dashboard import format as fmt
from perdure.types import Step

NODE_W = 168
NODE_H = 44
GAP_X = 64
GAP_Y = 18
PAD = 12
LABEL = 20


@dataclass(frozen=True)
class Node:
    """A step's box: position, label, status and its tooltip."""

    name: str
    label: str
    x: int
    y: int
    status: str
    tone: str
    title: str


@dataclass(frozen=True)
class Dag:
    """Nodes, edges as SVG path data, and the drawing's size."""

    nodes: list[Node]
    edges: list[str]
    width: int
    height: int


def layout(definition: dict[str, Any], steps: list[Step] | None = None) -> Dag | None:
    """The drawing of a graph definition, with each node's status from ``steps``.

    None when the definition holds no steps (a function workflow).
    """
    specs = sorted(definition.get("steps") or [], key=lambda s: s.get("position", 0))
    if not specs:
        return None
    depth: dict[str, int] = {}
    for spec in specs:
        deps = [d for d in spec.get("depends_on") or [] if d in depth]
        depth[spec["name"]] = 1 + max((depth[d] for d in deps), default=-1)
    columns: dict[int, list[str]] = {}
    for spec in specs:
        columns.setdefault(depth[spec["name"]], []).append(spec["name"])
    tallest = max(len(names) for names in columns.values())
    height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y
    width = PAD * 2 + len(columns) * NODE_W + (len(columns) - 1) * GAP_X
    recorded = {s.name: s for s in steps or [] if s.kind != "compensation"}
    notes = {spec["name"]: _note(spec) for spec in specs}
    places: dict[str, tuple[int, int]] = {}
    nodes = []
    for column, names in sorted(columns.items()):
        used = len(names) * NODE_H + (len(names) - 1) * GAP_Y
        top = (height - used) // 2
        for row, name in enumerate(names):
            x = PAD + column * (NODE_W + GAP_X)
            y = top + row * (NODE_H + GAP_Y)
            places[name] = (x, y)
            if steps is None:
                # The definition alone (the workflows page): settings, no status.
                label = name if len(name) <= LABEL else name[: LABEL - 1] + "…"
                nodes.append(Node(name, label, x, y, notes[name], "plain", name))
            else:
                nodes.append(_node(name, x, y, recorded.get(name)))
    edges = []
    for spec in specs:
        for dep in spec.get("depends_on") or []:
            if dep in places:
                edges.append(_edge(places[dep], places[spec["name"]]))
    return Dag(nodes, edges, width, height)


def _node(name: str, x: int, y: int, step: Step | None) -> Node:
    label = name if len(name) <= LABEL else name[: LABEL - 1] + "…"
    if step is None:
        return Node(name, label, x, y, "not started", "none", f"{name}: not started")
    status = step.status.value
    took = fmt.between(step.started_at, step.completed_at)
    attempts = f", {step.attempts} attempts" if step.attempts > 1 else ""
    return Node(name, label, x, y, status, fmt.tone(status), f"{name}: {status}{attempts}, {took}")


def _note(spec: dict[str, Any]) -> str:
    """What the drawing says under a step's name when no run is shown."""
    if spec.get("signal"):
        return f"waits for {spec['signal']}"
    if spec.get("join") == "any":
        return "any dependency"
    return "when …" if spec.get("when") else ""


def _edge(source: tuple[int, int], target: tuple[int, int]) -> str:
    """A cubic curve from the right middle of ``source`` to the left middle of ``target``."""
    x1, y1 = source[0] + NODE_W, source[1] + NODE_H // 2
    x2, y2 = target[0], target[1] + NODE_H // 2
    bend = (x2 - x1) // 2
    return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2 - 6},{y2}"
