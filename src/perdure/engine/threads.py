"""The threads that run a worker's plain ``def`` steps and workflow bodies.

Python cannot interrupt a thread. When the coroutine waiting for a ``def``
step gives up on it (the step's ``timeout=`` passed, the lease was lost, the
worker is stopping), the function goes on running on its thread. Such a
thread is *stuck*: ``StepThreads`` counts it until the function returns.

The worker treats each stuck thread as holding the slot its step held: it
claims only ``concurrency - running - stuck`` tasks, so a worker whose
threads are all stuck stops claiming work it could not start, and other
workers take that work. When a stuck function returns, the slot is free again
and ``on_freed`` wakes the claim loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

log = logging.getLogger("perdure.worker")

P = ParamSpec("P")
T = TypeVar("T")


class StepThreads(Executor):
    """A thread pool that knows how many of its threads run calls nobody waits for."""

    def __init__(
        self,
        size: int,
        *,
        name: str = "perdure-step",
        on_stuck: Callable[[int], None] | None = None,
        on_freed: Callable[[int], object] | None = None,
    ) -> None:
        """``size`` threads. ``on_stuck(count)`` and ``on_freed(count)`` hear each change
        of the number of stuck threads (``on_freed`` from the thread that came free)."""
        self.size = size
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._on_stuck = on_stuck
        self._on_freed = on_freed
        #: Calls running now, and those of them nobody waits for any more.
        self.busy = 0
        self.stuck = 0
        #: Calls given up on since the pool started (each counted once).
        self.given_up = 0

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a thread; cancelling the future once it runs
        gives up on the call (it is counted as stuck until it returns)."""
        call: _Call[T] = _Call(self)
        self._pool.submit(call.run, lambda: fn(*args, **kwargs))
        return call

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the pool (stuck threads cannot be stopped: they end when their call returns)."""
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def _give_up(self) -> None:
        with self._lock:
            self.stuck += 1
            self.given_up += 1
            stuck = self.stuck
        log.warning(
            "a step's thread is still running after its caller gave up on it "
            "(%d of %d threads stuck); it holds a slot until it returns",
            stuck,
            self.size,
        )
        if self._on_stuck is not None:
            self._on_stuck(stuck)


class _Call(Future[T]):
    """One call on a StepThreads pool: its future, which a running call cannot cancel."""

    def __init__(self, threads: StepThreads) -> None:
        super().__init__()
        self._threads = threads
        self._given_up = False

    def cancel(self) -> bool:
        """Cancel the call if it has not started; else give up on it (False: it goes on)."""
        threads = self._threads
        with threads._lock:
            if not self.running() or self._given_up:
                return super().cancel()
            self._given_up = True
        threads._give_up()
        return False

    def run(self, call: Callable[[], T]) -> None:
        """Run ``call`` on this thread unless cancelled first; resolve the future."""
        if not self.set_running_or_notify_cancel():
            return
        threads = self._threads
        with threads._lock:
            threads.busy += 1
        try:
            result = call()
        except BaseException as exc:
            self.set_exception(exc)
        else:
            self.set_result(result)
        finally:
            with threads._lock:
                threads.busy -= 1
                freed = self._given_up
                if freed:
                    threads.stuck -= 1
                stuck = threads.stuck
            if freed and threads._on_freed is not None:
                threads._on_freed(stuck)
