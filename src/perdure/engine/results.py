"""The results of a gather or map whose outputs were offloaded: fetched when read.

A step's output over the offload size (docs/large-payloads.md) is stored in
an object store, its row holding a reference. The claim that resumes a run
reads such outputs as references (``Offloaded``), so a run whose map returned
a thousand large values does not hold them all: ``ctx.gather`` and
``ctx.map`` return a ``StepResults`` in place of the list, which fetches an
output when the workflow reads it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, overload

from perdure.engine import typed
from perdure.engine.executor import Execution
from perdure.steps import StepCall
from perdure.store.codec import opened
from perdure.types import Step, StepStatus

#: How many offloaded results iterating over a gather's or map's results fetches ahead.
READ_AHEAD = 4


def outcome(ex: Execution, recorded: Step, call: StepCall[Any]) -> Any:
    """A step task's result: its output (rebuilt as its declared type) or its failure."""
    if recorded.status == StepStatus.COMPLETED:
        output = ex.output_of(recorded)
        return typed.return_hint(call.fn).rebuild(output, f"the output of {call.name!r}")
    return ex.recorded_failure(recorded)


class StepResults(Sequence[Any]):
    """The results of a gather or map some of whose outputs were offloaded.

    A read-only sequence in step order: reading an item fetches that output
    from the object store (a blocking read) and rebuilds it, every time it is
    read; nothing is kept, so iterating over a thousand 1 MiB results holds
    a few at a time (iterating reads ``READ_AHEAD`` results ahead, in
    threads). Keep what you read in a variable to read it once; ``list()``
    of it fetches them all and holds them all.
    """

    #: Encoded as the JSON list of its items (engine.serialization), fetched one by one.
    json_list = True

    def __init__(
        self, ex: Execution, calls: Sequence[StepCall[Any]], records: Sequence[Step]
    ) -> None:
        """The results of ``calls``, recorded as ``records`` (in the same order)."""
        self._ex, self._calls, self._records = ex, calls, records

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return f"<StepResults of {len(self)} steps, fetched when read>"

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return outcome(self._ex, self._records[index], self._calls[index])

    def __iter__(self) -> Iterator[Any]:
        records = self._records
        with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="perdure-results") as pool:
            ahead: deque[Future[Any]] = deque()
            for index, recorded in enumerate(records):
                while len(ahead) < READ_AHEAD and index + len(ahead) < len(records):
                    ahead.append(pool.submit(opened, records[index + len(ahead)].output))
                value = ahead.popleft().result()
                fetched = dataclasses.replace(recorded, output=value)
                yield outcome(self._ex, fetched, self._calls[index])
                del value, fetched

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepResults | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
