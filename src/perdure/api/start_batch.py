"""Starts in flight at once are written together: group commit for ``app.start``.

A start on the App's pool that arrives while another start of the same shape
(workflow, version, queue, priority, delay, timeout, tags) is being written
waits for that statement, then goes with every start that arrived meanwhile
in one ``run_insert_many`` statement (at most ``MOST``), each with the
semantics of a single start: its own key, its own input, its own answer. A
start alone is written at once, by itself: no start waits for a timer, only
for the statement ahead of it, so one caller sees no change and many callers
share round trips, transactions and commits.

Starts in the caller's transaction, child runs, and starts with a partition
key, a dedup key or a debounce are written one by one, as before.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any

from perdure.api.core import Core
from perdure.store.rows import StartResult
from perdure.store.statement import Statement

#: The most starts one statement writes.
MOST = 1000
#: The parameters of ``run_insert`` that starts written together share.
_SHARED = (
    "workflow",
    "version",
    "queue",
    "priority",
    "delay_seconds",
    "timeout_seconds",
    "tags",
    "trace_context",
    "newest",
    "lookup",
    "now",
)
_Waiting = tuple[Statement[StartResult | None], "asyncio.Future[StartResult | None]"]
_BATCHERS: weakref.WeakKeyDictionary[Core, StartBatcher] = weakref.WeakKeyDictionary()


def batchable(stmt: Statement[Any]) -> bool:
    """Whether a start's statement may be written together with others."""
    p = stmt.params
    return (
        stmt.name == "run_insert"
        and p.get("parent_run_id") is None
        and p.get("partition_key") is None
        and p.get("dedup_key") is None
    )


async def insert(core: Core, stmt: Statement[StartResult | None]) -> StartResult | None:
    """Write a start's ``run_insert`` statement, together with the starts in flight
    of the same shape; its answer, as the statement alone would give it."""
    loop = asyncio.get_running_loop()
    batcher = _BATCHERS.get(core)
    if batcher is None or batcher.loop is not loop:
        batcher = _BATCHERS[core] = StartBatcher(core, loop)
    return await batcher.insert(stmt)


class StartBatcher:
    """The starts waiting to be written on one loop, by shape."""

    def __init__(self, core: Core, loop: asyncio.AbstractEventLoop) -> None:
        """Write ``core``'s starts on ``loop``."""
        self.core, self.loop = core, loop
        self.waiting: dict[tuple[Any, ...], list[_Waiting]] = {}
        self.writers: dict[tuple[Any, ...], asyncio.Task[None]] = {}
        #: Shapes of the starts being written alone, by their callers.
        self.alone: set[tuple[Any, ...]] = set()

    async def insert(self, stmt: Statement[StartResult | None]) -> StartResult | None:
        """Write ``stmt`` now if no statement of its shape is being written, else
        queue it behind that one; its answer."""
        shape = tuple(_frozen(stmt.params.get(name)) for name in _SHARED)
        if shape not in self.writers and shape not in self.alone:
            # Nothing of this shape in flight: written here, at once.
            self.alone.add(shape)
            try:
                return await self.core.run(stmt)
            finally:
                self.alone.discard(shape)
                self._start_writer(shape)
        answer: asyncio.Future[StartResult | None] = self.loop.create_future()
        self.waiting.setdefault(shape, []).append((stmt, answer))
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
        answers: list[StartResult | None]
        try:
            if len(batch) == 1:
                answers = [await self.core.run(batch[0][0])]
            else:
                found = await self.core.run(_together([stmt for stmt, _ in batch], self.core))
                answers = [found.get(index) for index in range(len(batch))]
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


def _together(starts: list[Statement[StartResult | None]], core: Core) -> Statement[Any]:
    """The ``run_insert_many`` statement of starts of one shape."""
    p = starts[0].params
    return core.statements.runs.insert_many(
        run_ids=[s.params["run_id"] for s in starts],
        workflow=p["workflow"],
        version=p["version"],
        queue=p["queue"],
        keys=[s.params["key"] for s in starts],
        inputs_json=[s.params["input"] for s in starts],
        priority=p["priority"],
        delay_seconds=p["delay_seconds"],
        timeout_seconds=p["timeout_seconds"],
        tags_json=p["tags"],
        newest=p["newest"],
        trace_context_json=p["trace_context"],
        lookup=p["lookup"],
    )


def _frozen(value: Any) -> Any:
    """``value`` as a dict key."""
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
    return value
