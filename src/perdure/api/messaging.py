"""Talking to runs from outside: signals, pause and resume, events, streams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg.errors

from perdure.api.patience import patiently
from perdure.api.portal import Portal
from perdure.engine import arguments, serialization
from perdure.engine.arguments import validate_name
from perdure.errors import EventTimeout, InvalidRunState, RunNotFound
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.types import Run, RunStatus

T = TypeVar("T")


class MessagingMixin:
    """The App's operations that send to, steer or read from a run."""

    if TYPE_CHECKING:
        _portal: Portal
        q: Statements
        max_payload_bytes: int

        async def _run(self, stmt: Statement[T]) -> T: ...

        async def _find(self, ref: str) -> Run: ...

    # Signals -------------------------------------------------------------------------

    def signal(self, run: str, name: str, payload: Any = None, *, key: str | None = None) -> int:
        """Send signal ``name`` with ``payload`` to run ``run`` (its id or key).

        The signal is recorded and the run woken in one transaction; it is kept
        until a ``ctx.wait_for_signal(name)`` consumes it, in order. Sending
        again with the same ``key`` records nothing new. A finished or unknown
        run is refused (InvalidRunState, RunNotFound). Returns the signal's id.
        """
        return self._portal.call(self._signal(run, name, payload, key))

    async def signal_async(
        self, run: str, name: str, payload: Any = None, *, key: str | None = None
    ) -> int:
        """Send a signal from async code; see :meth:`signal`."""
        return await self._portal.run(self._signal(run, name, payload, key))

    async def _signal(self, run: str, name: str, payload: Any, key: str | None) -> int:
        if not isinstance(run, str) or not run or not arguments.storable(run):
            raise RunNotFound(repr(run))
        validate_name("signal", name)
        key = arguments.optional_text("signal key", key, max_length=arguments.MAX_KEY_LENGTH)
        text = serialization.dumps(
            payload, f"the payload of signal {name!r}", self.max_payload_bytes
        )
        try:
            return await self._run(self.q.run_signal(run, name, text, key))
        except psycopg.errors.NoDataFound:
            raise RunNotFound(run) from None
        except psycopg.errors.ObjectNotInPrerequisiteState:
            found = await self._find(run)
            raise InvalidRunState(found.id, found.status.value, "signal") from None

    # Pause and resume ------------------------------------------------------------------

    def pause(self, run: str) -> Run:
        """Pause an unfinished run: it is not claimed until :meth:`resume`."""
        return self._portal.call(self._steer(run, "pause"))

    def resume(self, run: str) -> Run:
        """Resume a paused run, or wake a sleeping run now."""
        return self._portal.call(self._steer(run, "resume"))

    async def pause_async(self, run: str) -> Run:
        """Pause a run from async code."""
        return await self._portal.run(self._steer(run, "pause"))

    async def resume_async(self, run: str) -> Run:
        """Resume a run from async code."""
        return await self._portal.run(self._steer(run, "resume"))

    async def _steer(self, ref: str, operation: str) -> Run:
        run = await self._find(ref)
        stmt = self.q.run_pause(run.id) if operation == "pause" else self.q.run_resume(run.id)
        row = await self._run(stmt)
        if row is None:
            raise RunNotFound(ref)
        previous = RunStatus(row["previous_status"])
        already = operation == "pause" and previous == RunStatus.PAUSED
        if not row["changed"] and not already:
            raise InvalidRunState(run.id, previous.value, operation)
        return await self._find(run.id)

    # Events and streams ----------------------------------------------------------------

    def get_event(self, run: str, key: str, timeout: float = 0.0) -> Any:
        """The value run ``run`` published with ``ctx.set_event(key, ...)``.

        Waits up to ``timeout`` seconds for it; raises EventTimeout if it is
        still missing then (or once the run finished without publishing it).
        """
        return self._portal.call(self._get_event(run, key, timeout))

    async def get_event_async(self, run: str, key: str, timeout: float = 0.0) -> Any:
        """Wait for a run's event from async code; see :meth:`get_event`."""
        return await self._portal.run(self._get_event(run, key, timeout))

    async def _get_event(self, ref: str, key: str, timeout: float) -> Any:
        arguments.label("event key", key)
        timeout = arguments.seconds("timeout", timeout)
        deadline = time.monotonic() + timeout
        run = await patiently(lambda: self._find(ref), deadline)
        interval = 0.005
        while True:
            row = await patiently(lambda: self._run(self.q.event_get(run.id, key)), deadline)
            if row is not None:
                return row["value"]
            finished = (await patiently(lambda: self._find(run.id), deadline)).status.is_final
            if finished or time.monotonic() >= deadline:
                raise EventTimeout(run.id, key, timeout)
            await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
            interval = min(interval * 1.5, 0.2)

    def read_stream(self, run: str, key: str, *, timeout: float | None = None) -> Iterator[Any]:
        """Yield the values run ``run`` writes to stream ``key``, as they come.

        Ends when the run closes the stream or finishes. ``timeout`` bounds the
        wait for each next value (ResultTimeout-like EventTimeout when it passes).
        """
        cursor = 0
        while True:
            batch, done = self._portal.call(self._stream_batch(run, key, cursor, timeout))
            for seq, value in batch:
                cursor = seq
                yield value
            if done:
                return

    async def read_stream_async(
        self, run: str, key: str, *, timeout: float | None = None
    ) -> AsyncIterator[Any]:
        """Iterate a run's stream from async code; see :meth:`read_stream`."""
        cursor = 0
        while True:
            batch, done = await self._portal.run(self._stream_batch(run, key, cursor, timeout))
            for seq, value in batch:
                cursor = seq
                yield value
            if done:
                return

    async def _stream_batch(
        self, ref: str, key: str, after: int, timeout: float | None
    ) -> tuple[list[tuple[int, Any]], bool]:
        arguments.label("stream key", key)
        timeout = arguments.optional_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        run = await patiently(lambda: self._find(ref), deadline)
        interval = 0.005
        while True:
            rows = await patiently(
                lambda: self._run(self.q.stream_read(run.id, key, after)), deadline
            )
            values = [(r["seq"], r["value"]) for r in rows if not r["closed"]]
            closed = any(r["closed"] for r in rows)
            if values or closed:
                return values, closed
            if RunStatus((await patiently(lambda: self._find(run.id), deadline)).status).is_final:
                # The run may have written its last values just before finishing.
                rows = await patiently(
                    lambda: self._run(self.q.stream_read(run.id, key, after)), deadline
                )
                return [(r["seq"], r["value"]) for r in rows if not r["closed"]], True
            if deadline is not None and time.monotonic() >= deadline:
                raise EventTimeout(run.id, key, timeout or 0.0)
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, 0.1)

    def signals(self, run: str) -> list[dict[str, Any]]:
        """The signals a run received, oldest first, with when each was consumed."""
        return self._portal.call(self._signals(run))

    async def _signals(self, ref: str) -> list[dict[str, Any]]:
        run = await self._find(ref)
        return await self._run(self.q.signal_list(run.id))
