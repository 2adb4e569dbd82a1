"""Continue-as-new: a run ends as 'continued' and its successor starts, in one write.

``ctx.continue_as_new(input)`` raises ``ContinueAsNew`` (control flow, not an
error a workflow can catch); the execution ends there and writes the
continuation: the run is ended 'continued' and a new run of the same workflow
starts with ``input``, the key, the lineage and the unconsumed signals, in
one fenced statement (``statements.runs.continue_as_new``).
"""

from __future__ import annotations

from typing import Any, NoReturn

from perdure.engine import serialization
from perdure.engine.control import ContinueAsNew, Outcome
from perdure.engine.executor import Execution
from perdure.engine.stops import STOPS, stopped
from perdure.errors import ConfigurationError
from perdure.ids import new_run_id

#: The versions a successor may take: this run's (None) or the newest registered.
VERSIONS = (None, "newest")


async def continue_as_new(ex: Execution, value: Any, version: str | None) -> NoReturn:
    """Stop the execution to continue the run as new with input ``value``."""
    if version not in VERSIONS:
        raise ConfigurationError(
            f"continue_as_new's version must be None or 'newest', not {version!r}"
        )
    await ex.gate()
    # Replaying only (check-replay, a step task) or compensating: nothing new happens.
    ex.end_of_history()
    text, _ = serialization.roundtrip(
        value, f"the input continuing workflow {ex.spec.name!r}", ex.env.max_payload_bytes
    )
    raise ContinueAsNew(text, newest=version == "newest")


async def write(ex: Execution, continuation: ContinueAsNew) -> Outcome:
    """End the run as 'continued' and start its successor; what the execution became."""
    task, env = ex.task, ex.env
    statement = env.store.statements.runs.continue_as_new(
        task.fence, new_run_id(), continuation.input_json, continuation.newest
    )
    try:
        result = ex.fenced(await env.store.execute(statement))
    except STOPS as stop:
        return await stopped(ex, stop)
    if not result.changed:
        return Outcome.CANCELLED
    env.run_finished(task.run_id, task.workflow, "continued")
    return Outcome.CONTINUED
