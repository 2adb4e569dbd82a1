"""Deterministic helpers: the time, a random number and a UUID, recorded once;
and patches, which let one workflow body serve histories recorded before a change.

``ctx.now()``, ``ctx.random()`` and ``ctx.uuid4()`` each take a position like
a step (kind ``step``, named ``ctx.now``, ``ctx.random``, ``ctx.uuid4``). The
first execution makes the value and records it as a completed checkpoint, held
for group commit like any step's; every replay returns the recorded value.
A replay that meets another call at that position (a step, or another helper)
fails with ``NonDeterminismError``, as a changed step order does.

``ctx.patched(patch_id)`` records a marker (a completed checkpoint named
``ctx.patched:<patch_id>``) the first time a run reaches it and answers True;
a replay that finds the marker at its position answers True again, and one
that finds another checkpoint there (history recorded by the code before the
patch) answers False without taking the position, so the old code replays.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from perdure.engine import arguments, serialization
from perdure.engine.checkpoint import Attempt
from perdure.engine.executor import Execution

#: The step names the helpers record under (shown as such in history and the dashboard).
NOW, RANDOM, UUID4 = "ctx.now", "ctx.random", "ctx.uuid4"
#: The step name of a patch's marker: ``ctx.patched:<patch id>``.
PATCH = "ctx.patched:"


def patch_id(given: object) -> str:
    """A patch id: printable text that fits a step name, or ConfigurationError."""
    limit = arguments.MAX_LABEL_LENGTH - len(PATCH)
    return arguments.text("a patch id", given, max_length=limit, control=False)


async def value(ex: Execution, name: str, make: Callable[[], Any]) -> Any:
    """The value recorded at this position for helper ``name``, or ``make()`` recorded now."""
    await ex.gate()
    position, recorded = ex.advance(name, "step")
    if recorded is not None:
        return ex.replayed(recorded)
    ex.end_of_history()
    made = make()
    text = serialization.dumps(made, f"the value of {name}", ex.env.max_payload_bytes)
    attempt = Attempt(position, name, "step", 1, ex.env.store.statements.clock.wall_now())
    await ex.checkpoint(attempt, "completed", text, None)
    return made


async def now(ex: Execution) -> datetime:
    """The current time (aware, UTC; the App's clock), the same on every replay."""
    text = await value(ex, NOW, lambda: ex.env.store.statements.clock.wall_now().isoformat())
    return datetime.fromisoformat(text)


async def random_float(ex: Execution) -> float:
    """A random float in [0.0, 1.0), the same on every replay."""
    return float(await value(ex, RANDOM, random.random))


async def uuid4(ex: Execution) -> uuid.UUID:
    """A random UUID, the same on every replay."""
    return uuid.UUID(await value(ex, UUID4, lambda: str(uuid.uuid4())))


async def patched(ex: Execution, patch_id: str) -> bool:
    """Whether this run takes the code of patch ``patch_id`` (see the module's docstring)."""
    await ex.gate()
    marker = PATCH + patch_id
    taken = ex.cursor.patch(patch_id, marker)
    if taken is None:
        await value(ex, marker, lambda: True)
        ex.cursor.patches[patch_id] = taken = True
    return taken


async def deprecate_patch(ex: Execution, patch_id: str) -> None:
    """Replay past patch ``patch_id``'s marker if one is recorded here; record nothing."""
    await ex.gate()
    ex.cursor.skip_marker(PATCH + patch_id)
