"""Sending an update to a run and waiting for its reply; update-with-start.

The request is one row (``updates``), written with the run's row locked and
the run woken if it waits, as a signal is. Its worker validates it, applies
it and stores the reply (engine/updates.py); the caller waits for the reply
until its timeout, woken by the NOTIFY the reply's write sends (the App's
``Notices``), looking again at least every ``MAX_POLL_SECONDS`` (a run that
finished without replying, a listener reconnecting). The update id makes a
retried call find the first request and its reply: each update is applied once.
A request a run has not decided when it continues as new moves to its
successor, and the caller waits for the reply from there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from perdure.api import starting
from perdure.api.core import Core
from perdure.api.notices import Watch
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import (
    ConfigurationError,
    InvalidRunState,
    RunNotFound,
    UpdateFailed,
    UpdateRejected,
    UpdateTimeout,
)

#: The longest a caller goes between two looks for a reply when no NOTIFY
#: wakes it (a run that finished without replying, a listener reconnecting).
MAX_POLL_SECONDS = 0.25
#: The longest update id.
MAX_UPDATE_ID_LENGTH = 200
#: A run in one of these statuses replies to no more requests ('continued': a
#: request it accepted and did not answer before it continued as new).
_FINAL = {"completed", "failed", "cancelled", "compensated", "compensation_failed", "continued"}


async def update(
    core: Core,
    run: str,
    name: str,
    payload: Any = None,
    *,
    update_id: str | None = None,
    timeout: float | timedelta | None = None,
) -> Any:
    """Send update ``name`` with ``payload`` to run ``run`` (its id or key); its reply.

    The run's worker validates the request where the run waits (``ctx.sleep``,
    ``ctx.wait_for_signal``): a refusal raises
    [`UpdateRejected`][perdure.errors.UpdateRejected] and records nothing in
    the run. An accepted update's handler runs as part of the run, and what it
    returns is the reply; if it raises,
    [`UpdateFailed`][perdure.errors.UpdateFailed] (the run goes on). With the
    same ``update_id`` (default: a new one), a retried call gets the same
    reply and the update is applied once. ``timeout`` (None waits as long as
    it takes) raises [`UpdateTimeout`][perdure.errors.UpdateTimeout]; the
    request stays, and a call with its id waits again. A finished or unknown
    run is refused (InvalidRunState, RunNotFound).
    """
    if not isinstance(run, str) or not run or not arguments.storable(run):
        raise RunNotFound(repr(run))
    validate_name("update", name)
    given = arguments.optional_text("update id", update_id, max_length=MAX_UPDATE_ID_LENGTH)
    if given == "":
        raise ConfigurationError("update id must not be empty")
    the_id = given if given is not None else uuid.uuid4().hex
    seconds = arguments.optional_seconds("update timeout", timeout)
    deadline = None if seconds is None else time.monotonic() + seconds
    text = serialization.dumps(payload, f"the payload of update {name!r}", core.max_payload_bytes)
    found = await core.find(run)
    handlers = core.registry.updates.get(found.workflow)
    if core.registry.get(found.workflow) is not None and name not in (handlers or {}):
        raise UpdateRejected(found.id, the_id, name, f"the workflow has no update handler {name!r}")
    await core.run(core.statements.updates.request(found.id, the_id, name, text))
    return await _reply(core, found.id, the_id, name, deadline, seconds)


#: ``update`` under a name ``update_with_start``'s own parameter does not hide.
_send = update


async def _reply(
    core: Core,
    run_id: str,
    update_id: str,
    name: str,
    deadline: float | None,
    seconds: float | None,
) -> Any:
    """Wait for the reply to update ``update_id`` until ``deadline``, listening for the
    run that holds the request (the successor, once the run continued as new)."""
    watched = run_id
    while True:
        with core.notices().watch(watched) as watch:
            found = await _replied(core, watch, watched, run_id, update_id, name, deadline, seconds)
        if not isinstance(found, _Moved):
            return found
        watched = found.run_id


class _Moved:
    """The request is held by another run of the chain (it continued as new)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


async def _replied(
    core: Core,
    watch: Watch,
    watched: str,
    run_id: str,
    update_id: str,
    name: str,
    deadline: float | None,
    seconds: float | None,
) -> Any:
    """Look for the reply, and wait on ``watch`` (taken before the first look) between
    looks; _Moved when the request is held by a run other than ``watched``."""
    while True:
        row = await core.read(core.statements.updates.get(run_id, update_id))
        if row is None:
            raise RunNotFound(run_id)
        status = row["status"]
        if status is not None and row["name"] != name:
            raise ConfigurationError(
                f"update id {update_id!r} of run {run_id} is update {row['name']!r}, not {name!r}"
            )
        if status == "completed":
            return row["result"]
        if status in ("rejected", "failed"):
            error = row["error"] if isinstance(row["error"], dict) else {}
            if status == "rejected":
                raise UpdateRejected(run_id, update_id, name, str(error.get("message", "")))
            raise UpdateFailed(run_id, update_id, name, error)
        if row["run_status"] in _FINAL:
            # Ended before it served the request (or before it was written).
            raise InvalidRunState(str(row["live_id"]), row["run_status"], "update")
        if str(row["live_id"]) != watched:
            return _Moved(str(row["live_id"]))
        if deadline is not None and time.monotonic() >= deadline:
            raise UpdateTimeout(run_id, update_id, name, seconds or 0.0)
        left = MAX_POLL_SECONDS if deadline is None else deadline - time.monotonic()
        await watch.wait(max(min(left, MAX_POLL_SECONDS), 0.0))


async def update_with_start(
    core: Core,
    workflow: str | Callable[..., Any],
    *,
    key: str,
    update: str,
    input: Any = None,
    payload: Any = None,
    update_id: str | None = None,
    timeout: float | timedelta | None = None,
    version: int | None = None,
) -> Any:
    """Start a run of ``workflow`` by ``key`` unless one exists, send it update
    ``update`` with ``payload``, and return the reply, in one call.

    Both writes are idempotent: the start by its key, the update by its id
    (pass ``update_id`` to retry the whole call safely). A run with this key
    that has finished refuses the update (InvalidRunState), as
    [`update`][perdure.App.update] does.
    """
    if not isinstance(key, str) or not key:
        raise ConfigurationError("update_with_start needs a key (the run's identity)")
    validate_name("update", update)
    handle = await starting.start(core, workflow, input, key=key, version=version)
    return await _send(core, handle.id, update, payload, update_id=update_id, timeout=timeout)


async def updates(core: Core, run: str) -> list[dict[str, Any]]:
    """The updates a run was sent, oldest first: id, name, status, reply, when."""
    found = await core.find(run)
    return await core.read(core.statements.updates.of_run(found.id))
