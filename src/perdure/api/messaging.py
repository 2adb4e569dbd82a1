"""Talking to runs from outside: signals, pause and resume, published events, streams."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from perdure.api.core import Core
from perdure.api.patience import patiently
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import (
    ConfigurationError,
    EventTimeout,
    InvalidRunState,
    PerdureError,
    RunNotFound,
)
from perdure.store import caller
from perdure.types import Run, RunStatus


async def signal(
    core: Core, run: str, name: str, payload: Any = None, *, key: str | None = None
) -> int:
    """Send signal ``name`` with ``payload`` to run ``run`` (its id or key).

    The signal is recorded and the run woken in one transaction; it is kept
    until a ``ctx.wait_for_signal(name)`` consumes it, in order. Sending
    again with the same ``key`` records nothing new. A finished or unknown
    run is refused (InvalidRunState, RunNotFound). Returns the signal's id.
    """
    if not isinstance(run, str) or not run or not arguments.storable(run):
        raise RunNotFound(repr(run))
    validate_name("signal", name)
    key = arguments.optional_text("signal key", key, max_length=arguments.MAX_KEY_LENGTH)
    text = serialization.dumps(payload, f"the payload of signal {name!r}", core.max_payload_bytes)
    sent = await caller.signal_refusal(core.run(core.statements.runs.signal(run, name, text, key)))
    if sent is caller.Refusal.NO_RUN:
        raise RunNotFound(run)
    if sent is caller.Refusal.FINISHED:
        found = await core.find(run)
        raise InvalidRunState(found.id, found.status.value, "signal")
    return sent


async def signal_many(
    core: Core,
    runs: Sequence[str],
    name: str,
    payloads: Sequence[Any] | None = None,
    *,
    keys: Sequence[str | None] | None = None,
) -> list[int]:
    """Send signal ``name`` to each run of ``runs`` (ids or keys), in one statement;
    the signals' ids, in order.

    Item ``i`` sends ``payloads[i]`` (None without ``payloads``) with
    ``keys[i]``, as [`signal`][perdure.App.signal] does one; a run may appear more than once,
    and its signals keep their order. Every item is checked first, and one
    refused (a bad payload or key, an unknown or finished run) refuses the
    whole batch with an error that names its index: nothing is written.
    """
    if isinstance(runs, str | bytes):
        raise ConfigurationError(f"runs must be a list of run ids or keys, not {runs!r}")
    refs = list(runs)
    values = [None] * len(refs) if payloads is None else list(payloads)
    named: list[str | None] = [None] * len(refs) if keys is None else list(keys)
    for label, given in (("payloads", values), ("keys", named)):
        if len(given) != len(refs):
            raise ConfigurationError(f"{label} has {len(given)} items, runs has {len(refs)}")
    validate_name("signal", name)
    texts: list[str] = []
    for index, (ref, payload) in enumerate(zip(refs, values, strict=True)):
        try:
            if not isinstance(ref, str) or not ref or not arguments.storable(ref):
                raise RunNotFound(repr(ref))
            named[index] = arguments.optional_text(
                "signal key", named[index], max_length=arguments.MAX_KEY_LENGTH
            )
            what = f"the payload of signal {name!r}"
            texts.append(serialization.dumps(payload, what, core.max_payload_bytes))
        except PerdureError as exc:
            exc.args = (f"item {index} of {len(refs)}: {exc}",)
            raise
    if not refs:
        return []
    statement = core.statements.runs.signal_many(refs, [name] * len(refs), texts, named)
    sent = await caller.signal_refusal(core.run(statement))
    if isinstance(sent, caller.Refusal):
        raise await _refused(core, refs)
    return sent


async def _refused(core: Core, refs: list[str]) -> PerdureError:
    """The error naming the first item of a refused batch whose run is unknown or finished."""
    for index, ref in enumerate(refs):
        error: PerdureError | None = None
        try:
            found = await core.find(ref)
            if found.status.is_final:
                error = InvalidRunState(found.id, found.status.value, "signal")
        except RunNotFound as missing:
            error = missing
        if error is not None:
            error.args = (f"item {index} of {len(refs)}: {error}",)
            return error
    # The run that refused is gone since (removed by retention): name none.
    return PerdureError("a run of the batch ended while it was sent: nothing was sent")


async def signals(core: Core, run: str, signal_id: int | None = None) -> list[dict[str, Any]]:
    """The signals a run received, oldest first, with when each was consumed; with
    ``signal_id`` (as ``signal`` returned it), only that one (none if it is another run's)."""
    found = await core.find(run)
    if signal_id is not None:
        signal_id = arguments.integer("signal_id", signal_id, minimum=1, maximum=2**63 - 1)
    return await core.read(core.statements.signals.list(found.id, signal_id))


async def pause(core: Core, run: str) -> Run:
    """Pause an unfinished run: it is not claimed until [`resume`][perdure.App.resume]."""
    return await _steer(core, run, "pause")


async def resume(core: Core, run: str) -> Run:
    """Resume a paused run, or wake a sleeping run now."""
    return await _steer(core, run, "resume")


async def _steer(core: Core, ref: str, operation: str) -> Run:
    run = await core.find(ref)
    stmt = (
        core.statements.runs.pause(run.id)
        if operation == "pause"
        else core.statements.runs.resume(run.id)
    )
    row = await core.run(stmt)
    if row is None:
        raise RunNotFound(ref)
    previous = RunStatus(row["previous_status"])
    already = operation == "pause" and previous == RunStatus.PAUSED
    if not row["changed"] and not already:
        raise InvalidRunState(run.id, previous.value, operation)
    return await core.find(run.id)


async def get_event(core: Core, run: str, key: str, timeout: float = 0.0) -> Any:
    """The value run ``run`` published with ``ctx.set_event(key, ...)``.

    Waits up to ``timeout`` seconds for it; raises EventTimeout if it is
    still missing then (or once the run finished without publishing it).
    """
    arguments.label("event key", key)
    timeout = arguments.seconds("timeout", timeout)
    deadline = time.monotonic() + timeout
    found = await patiently(lambda: core.find(run), deadline)
    with core.notices().watch(found.id) as watch:
        while True:
            row = await patiently(
                lambda: core.read(core.statements.events.get(found.id, key)), deadline
            )
            if row is not None:
                return row["value"]
            finished = (await patiently(lambda: core.find(found.id), deadline)).status.is_final
            left = deadline - time.monotonic()
            if finished or left <= 0:
                raise EventTimeout(found.id, key, timeout)
            # Woken when the run publishes anything (or at the fallback interval).
            await watch.wait(left)


async def read_stream(
    core: Core, run: str, key: str, *, timeout: float | None = None
) -> AsyncIterator[Any]:
    """Yield the values run ``run`` writes to stream ``key``, as they come.

    Ends when the run closes the stream or finishes. ``timeout`` bounds the
    wait for each next value (EventTimeout when it passes).
    """
    cursor = 0
    while True:
        batch, done = await _stream_batch(core, run, key, cursor, timeout)
        for seq, value in batch:
            cursor = seq
            yield value
        if done:
            return


async def _stream_batch(
    core: Core, ref: str, key: str, after: int, timeout: float | None
) -> tuple[list[tuple[int, Any]], bool]:
    arguments.label("stream key", key)
    timeout = arguments.optional_seconds("timeout", timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    run = await patiently(lambda: core.find(ref), deadline)
    with core.notices().watch(run.id) as watch:
        while True:
            rows = await patiently(
                lambda: core.read(core.statements.streams.read(run.id, key, after)), deadline
            )
            values = [(r["seq"], r["value"]) for r in rows if not r["closed"]]
            closed = any(r["closed"] for r in rows)
            if values or closed:
                return values, closed
            if RunStatus((await patiently(lambda: core.find(run.id), deadline)).status).is_final:
                # The run may have written its last values just before finishing.
                rows = await patiently(
                    lambda: core.read(core.statements.streams.read(run.id, key, after)), deadline
                )
                return [(r["seq"], r["value"]) for r in rows if not r["closed"]], True
            left = float("inf") if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise EventTimeout(run.id, key, timeout or 0.0)
            # Woken when the run publishes anything (or at the fallback interval).
            await watch.wait(left)
