"""The records a step's checkpoint travels in, from the attempt to its fenced write."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from perdure.store.rows import Fenced
from perdure.store.statement import Statement


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt at one step: where it is, which try it is, when it began."""

    position: int
    name: str
    kind: str
    #: 1 on the first try.
    number: int
    started: datetime


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An attempt's outcome as the fenced write that records it."""

    attempt: Attempt
    #: 'completed', 'failed', 'retrying' or 'timed_out'.
    status: str
    statement: Statement[Fenced]
