"""Starts in flight at once are written together: group commit for ``app.start``.

A start on the App's pool that arrives while another start of the same shape
(workflow, version, queue, priority, delay, timeout, tags) is being written
waits for that statement, then goes with every start that arrived meanwhile
in one ``run_insert`` statement (at most ``MOST``), each with the
semantics of a single start: its own key, its own input, its own answer. A
start alone is written at once, by itself: no start waits for a timer, only
for the statement ahead of it, so one caller sees no change and many callers
share round trips, transactions and commits.

Starts in the caller's transaction, child runs, and starts with a partition
key, a dedup key or a debounce are written one by one, as before.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from perdure.api.core import Core
from perdure.store.rows import StartResult
from perdure.store.writes import Start

#: The most starts one statement writes.
MOST = 1000
_Waiting = tuple[Start, "asyncio.Future[StartResult | None]"]
_BATCHERS: weakref.WeakKeyDictionary[Core, StartBatcher] = weakref.WeakKeyDictionary()


def batchable(start: Start) -> bool:
    """Whether a start may be written together with others."""
    return (
        start.parent_run_id is None
        and start.queueing.partition_key is None
        and start.queueing.dedup_key is None
    )


async def insert(core: Core, start: Start) -> StartResult | None:
    """Write ``start``, together with the starts in flight of the same shape; its
    answer, as a statement of its own would give it."""
    loop = asyncio.get_running_loop()
    batcher = _BATCHERS.get(core)
    if batcher is None or batcher.loop is not loop:
        batcher = _BATCHERS[core] = StartBatcher(core, loop)
    return await batcher.insert(start)


class StartBatcher:
    """The starts waiting to be written on one loop, by shape."""

    def __init__(self, core: Core, loop: asyncio.AbstractEventLoop) -> None:
        """Write ``core``'s starts on ``loop``."""
        self.core, self.loop = core, loop
        self.waiting: dict[tuple[Any, ...], list[_Waiting]] = {}
        self.writers: dict[tuple[Any, ...], asyncio.Task[None]] = {}
        #: Shapes of the starts being written alone, by their callers.
        self.alone: set[tuple[Any, ...]] = set()

    async def insert(self, start: Start) -> StartResult | None:
        """Write ``start`` now if no statement of its shape is being written, else
        queue it behind that one; its answer."""
        shape = start.shape
        if shape not in self.writers and shape not in self.alone:
            # Nothing of this shape in flight: written here, at once.
            self.alone.add(shape)
            try:
                return (await self.core.run(self.core.statements.runs.insert([start])))[0]
            finally:
                self.alone.discard(shape)
                self._start_writer(shape)
        answer: asyncio.Future[StartResult | None] = self.loop.create_future()
        self.waiting.setdefault(shape, []).append((start, answer))
        if shape not in self.alone:
            self._start_writer(shape)
        return await answer

    def _start_writer(self, shape: tuple[Any, ...]) -> None:
        """Write the starts of ``shape`` that wait, unless a writer does already."""
        if self.waiting.get(shape) and shape not in self.writers:
            self.writers[shape] = self.loop.create_task(self._write(shape))

    async def _write(self, shape: tuple[Any, ...]) -> None:
        """Write the starts of ``shape`` a statement at a time until none is waiting."""
        try:
            while True:
                queued = self.waiting.pop(shape, [])
                if not queued:
                    return
                batch, rest = queued[:MOST], queued[MOST:]
                if rest:
                    self.waiting[shape] = rest + self.waiting.get(shape, [])
                await self._write_batch(batch)
        finally:
            self.writers.pop(shape, None)

    async def _write_batch(self, batch: list[_Waiting]) -> None:
        """One statement for ``batch``; each start's answer (or the error) to its caller."""
        try:
            answers = await self.core.run(
                self.core.statements.runs.insert([start for start, _ in batch])
            )
        except BaseException as exc:
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, answer), found_one in zip(batch, answers, strict=True):
            if not answer.done():
                answer.set_result(found_one)
