"""The opt-in detector of the clock, randomness and UUIDs read in a workflow body.

A workflow body is replayed, so ``datetime.now()``, ``time.time()``,
``random.random()`` (and the module's ``randint``, ``choice``...) or
``uuid.uuid4()`` called directly in it return another value on each replay.
While a body runs under the detector (``perdure worker
--detect-nondeterminism``, ``WorkerOptions.detect_nondeterminism``, on by
default in ``perdure.testing.drain``), such a call is reported with the file
and line that made it: a warning on the ``perdure.nondeterminism`` logger and
a [`NondeterministicCall`][perdure.engine.nondeterminism.NondeterministicCall]
for every collector (``perdure.testing.nondeterministic_calls``).

It watches with a profile function (``sys.setprofile``) installed only while
the body runs: around each resumption of an ``async def`` body's coroutine,
and on the thread of a plain ``def`` body for as long as it runs. That sees
``from datetime import datetime`` and ``from time import time`` too, which
replacing the module attributes would miss (and ``datetime.now`` cannot be
replaced). Steps run inside the same asyncio task as the body: a context
variable set while a step runs (``in_step``, only on a worker with the
detector on) keeps the detector quiet there.
Calls made by perdure itself, by the standard library and by the libraries
the engine uses are not reported, only those made from the user's code.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date
from types import FrameType
from typing import Any, TypeVar

log = logging.getLogger("perdure.nondeterminism")

T = TypeVar("T")

#: True while a step's function runs (set by engine.attempts).
_IN_STEP: ContextVar[bool] = ContextVar("perdure_in_step", default=False)

#: Packages whose own calls are never reported (perdure's and its libraries').
_QUIET = frozenset(
    {"perdure", "psycopg", "psycopg_pool", "psycopg_binary", "opentelemetry", "pydantic"}
    | {"pydantic_core", "prometheus_client", "structlog", "click", "_pytest", "pytest"}
    | set(sys.stdlib_module_names)
)
_CLOCK_METHODS = frozenset({"now", "utcnow", "today"})
_RANDOM_BUILTINS = frozenset({"random", "getrandbits", "randbytes"})
_RANDOM_METHODS = {
    getattr(random.Random, name).__code__: f"random.{name}"
    for name in (
        "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform",
        "gauss", "normalvariate", "triangular", "betavariate", "expovariate",
    )
}  # fmt: skip
_UUIDS = {uuid.uuid4.__code__: "uuid.uuid4", uuid.uuid1.__code__: "uuid.uuid1"}

_collectors: list[list[NondeterministicCall]] = []
_collectors_lock = threading.Lock()


@dataclass(frozen=True)
class NondeterministicCall:
    """A direct call to the clock, to randomness or to a UUID made by a workflow body."""

    run_id: str
    workflow: str
    #: What was called: ``datetime.now``, ``time.time``, ``random.randint``, ``uuid.uuid4``...
    call: str
    filename: str
    lineno: int

    def __str__(self) -> str:
        """``file:line`` and what to call instead."""
        return (
            f"{self.filename}:{self.lineno}: workflow {self.workflow!r} (run {self.run_id}) "
            f"calls {self.call}() in its body; its replays will see another value. "
            "Use ctx.now(), ctx.random() or ctx.uuid4(), or call it in a step"
        )


def in_step(watched: bool = True) -> AbstractContextManager[None]:
    """Mark the code run inside the block as a step's: the detector ignores it.

    ``watched``: whether the execution's body runs under the detector. When
    it does not, no profile function can see the step, so nothing is marked
    (a step costs no context variable on a worker without the detector).
    """
    return _marked() if watched else _UNWATCHED


@contextmanager
def _marked() -> Iterator[None]:
    token = _IN_STEP.set(True)
    try:
        yield
    finally:
        _IN_STEP.reset(token)


#: The block of a step whose execution is not watched: nothing to mark.
_UNWATCHED = nullcontext()


@contextmanager
def collect() -> Iterator[list[NondeterministicCall]]:
    """Collect every call reported while the block runs, in this process."""
    found: list[NondeterministicCall] = []
    with _collectors_lock:
        _collectors.append(found)
    try:
        yield found
    finally:
        with _collectors_lock:
            _collectors.remove(found)


@dataclass
class Watch:
    """The detector of one body's execution: what it reported already (once per line)."""

    run_id: str
    workflow: str
    seen: set[tuple[str, str, int]] = field(default_factory=set)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        """The profile function: report a watched call made from the user's code."""
        if event == "c_call":
            called = _builtin_name(arg)
            caller: FrameType | None = frame
        elif event == "call":
            called = _python_name(frame)
            caller = frame.f_back
        else:
            return
        if called is None or caller is None or _IN_STEP.get():
            return
        module = str(caller.f_globals.get("__name__", "")).partition(".")[0]
        if module in _QUIET:
            return
        self.report(called, caller.f_code.co_filename, caller.f_lineno)

    def report(self, called: str, filename: str, lineno: int) -> None:
        """Log the call once per line and hand it to every collector."""
        if (called, filename, lineno) in self.seen:
            return
        self.seen.add((called, filename, lineno))
        found = NondeterministicCall(self.run_id, self.workflow, called, filename, lineno)
        log.warning("%s", found, extra={"run_id": self.run_id, "workflow": self.workflow})
        with _collectors_lock:
            for collector in _collectors:
                collector.append(found)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` (an ``async def`` body) with the detector on while it runs."""
        result: T = await _Watched(coro, self)
        return result

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` (a plain ``def`` body) on this thread with the detector on."""
        previous = sys.getprofile()
        sys.setprofile(self.profile)
        try:
            return fn()
        finally:
            sys.setprofile(previous)


def _builtin_name(fn: Any) -> str | None:
    """The watched name of a C function being called, or None."""
    if fn is time.time or fn is time.time_ns:
        return f"time.{fn.__name__}"
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if isinstance(owner, type) and issubclass(owner, date) and name in _CLOCK_METHODS:
        return f"{owner.__name__}.{name}"
    if owner is getattr(random, "_inst", None) and name in _RANDOM_BUILTINS:
        return f"random.{name}"
    return None


def _python_name(frame: FrameType) -> str | None:
    """The watched name of a Python function just entered, or None."""
    code = frame.f_code
    if code in _UUIDS:
        return _UUIDS[code]
    if code in _RANDOM_METHODS and frame.f_locals.get("self") is getattr(random, "_inst", None):
        return _RANDOM_METHODS[code]
    return None


class _Watched:
    """An awaitable that drives a coroutine with the detector on while it runs."""

    def __init__(self, coro: Coroutine[Any, Any, Any], watch: Watch) -> None:
        self.coro, self.watch = coro, watch

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self.coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            previous = sys.getprofile()
            sys.setprofile(self.watch.profile)
            try:
                yielded = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                sys.setprofile(previous)
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # a cancellation or a throw: into the body
                value, error = None, exc
