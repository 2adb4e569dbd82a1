"""One execution of a claimed task: the executor its kind calls for, and what a failure leaves.

A task whose arguments or history cannot be decoded fails as poison
(engine/poison.py); a graph workflow's task goes to engine/graph.py, any
other to engine/outcome.py. The database lost mid-execution: the task is
handed back at once (engine/handback.py). Another error of the database:
the task stays claimed and its lease lapses, so another worker (or this
one) replays it. The observers are told of the execution's start and end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from perdure.engine import graph, outcome, poison
from perdure.engine.control import Disconnected, Outcome
from perdure.engine.environment import ExecutionEnv, WorkflowSpec
from perdure.engine.handback import hand_back
from perdure.engine.observer import task_fields
from perdure.store.rows import ClaimedTask

log = logging.getLogger("perdure.worker")


async def execute(
    task: ClaimedTask,
    spec: WorkflowSpec[Any],
    env: ExecutionEnv,
    *,
    stopping: asyncio.Event,
    ended: Callable[[ClaimedTask], None],
) -> Outcome:
    """Execute ``task`` once; how it ended (``ended(task)`` is called first, whatever
    happened; ``stopping``: the worker's stop request, which cuts a hand-back short)."""
    result: Outcome = Outcome.ERROR
    began = time.perf_counter()
    token = env.observer.execution_started(task)
    try:
        if (undecodable := poison.found(task)) is not None:
            result = await poison.fail(task, undecodable, env)
        elif getattr(spec, "kind", "function") == "graph":
            result = await graph.execute(task, spec, env)
        else:
            result = await outcome.execute(task, spec, env)
    except asyncio.CancelledError:
        result = Outcome.CANCELLED
        raise
    except Disconnected as exc:
        result = Outcome.DISCONNECTED
        env.unheld.disconnected(task.run_id)
        log.warning(
            "run %s: lost the database mid-execution (%s)",
            task.run_id,
            exc,
            extra=task_fields(task),
        )
        await hand_back(env.store, task, env.lease_seconds, stopping, exc)
    except Exception:
        # A database error mid-execution: the task stays claimed and its
        # lease lapses, so another worker (or this one) replays it.
        env.unheld.left_to_lapse.add(task.fence.task_id)
        log.exception(
            "executing run %s failed; its lease will lapse",
            task.run_id,
            extra=task_fields(task),
        )
    finally:
        env.observer.execution_finished(task, token, result, time.perf_counter() - began)
        env.lost_tasks.discard(task.fence.task_id)
        ended(task)
    return result
