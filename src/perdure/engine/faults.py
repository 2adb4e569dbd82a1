"""Fault points for tests: make the executing worker crash or a step fail on cue.

The executor calls ``hit`` at fixed points of a step (before it runs,
before its checkpoint, after its checkpoint has committed: for a checkpoint
held until the workflow's next await, when that write commits). With no fault
installed this is one empty-list check. perdure.testing installs faults for a
test's duration; they change nothing else of the path a step takes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


class SimulatedCrash(BaseException):
    """The worker 'dies' here: it stops executing the task and writes nothing more."""


@dataclass
class Fault:
    """One installed fault: at ``point`` of step ``step``, crash or raise ``error``."""

    step: str
    point: str
    error: BaseException | None = None
    times: int = 1
    hits: int = field(default=0)


_FAULTS: list[Fault] = []
_LOCK = threading.Lock()


def install(fault: Fault) -> None:
    """Activate ``fault`` until ``remove``."""
    with _LOCK:
        _FAULTS.append(fault)


def remove(fault: Fault) -> None:
    """Deactivate ``fault``."""
    with _LOCK:
        if fault in _FAULTS:
            _FAULTS.remove(fault)


def installed() -> bool:
    """Whether any fault is installed."""
    return bool(_FAULTS)


def hit(point: str, step: str) -> None:
    """Called by the executor at ``point`` of ``step``: trigger a matching fault."""
    if not _FAULTS:
        return
    with _LOCK:
        found = next(
            (f for f in _FAULTS if f.step == step and f.point == point and f.hits < f.times), None
        )
        if found is None:
            return
        found.hits += 1
    if found.error is not None:
        raise found.error
    raise SimulatedCrash(f"simulated crash {point} of step {step!r}")
