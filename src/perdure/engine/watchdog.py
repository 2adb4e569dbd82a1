"""The loop watch: tell when a step blocks the worker's event loop.

An ``async def`` step that does not yield (``time.sleep``, a blocking HTTP
client, a CPU-bound loop) stalls every run on its worker. The wakeup thread
pings the loop every PING_SECONDS (not at each notification: that would
wake every idle worker's loop for a task one of them takes); when a ping
stays unanswered longer than the
threshold, the watch logs a warning naming the run and the step running on
the loop, and reports the stall once the loop answers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from perdure.engine.observer import Observer, StepAttempt
from perdure.store.listener import Listener

log = logging.getLogger("perdure.worker")

#: The prefix of the names of the tasks that execute runs (``perdure-run-<id>``).
RUN_TASK_PREFIX = "perdure-run-"

#: Seconds between two pings the loop answered.
PING_SECONDS = 0.2


class LoopWatch:
    """A chore of the wakeup thread that times how long the loop takes to answer."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold: float,
        step_of: Callable[[str], str | None],
        on_blocked: Callable[[str | None, str | None, float], None],
        busy: Callable[[], bool] = lambda: True,
    ) -> None:
        """Watch ``loop``; warn past ``threshold`` s.

        ``step_of(run_id)`` names the step a run is executing (None: its
        body). ``on_blocked(run_id, step, seconds)`` is called on the loop
        once a stall ends. No ping is sent while ``busy()`` says no run is
        executing: only a run's code can block the loop, and an idle fleet's
        loops then sleep until they have work.
        """
        self.loop = loop
        self.threshold = threshold
        self.step_of = step_of
        self.on_blocked = on_blocked
        self.busy = busy
        self._sent: float | None = None
        self._answered = False
        self._culprit: tuple[str | None, str | None] | None = None

    @property
    def pinging(self) -> bool:
        """Whether the watch pings the loop now (a run executes)."""
        return self._sent is not None

    def _answer(self) -> None:
        self._answered = True

    def tend(self, listener: Listener | None) -> None:
        """Send a ping, or check the one in flight."""
        now = time.monotonic()
        if self._sent is None or self._answered:
            if self._culprit is not None and self._sent is not None:
                run_id, step = self._culprit
                log.warning(
                    "the event loop was blocked for %.1f s by run %s (%s)",
                    now - self._sent,
                    run_id or "-",
                    f"step {step}" if step else "workflow code",
                    extra={"run_id": run_id, "step": step},
                )
                self.loop.call_soon_threadsafe(self.on_blocked, run_id, step, now - self._sent)
                self._culprit = None
            elif self._sent is not None and now - self._sent < PING_SECONDS:
                return
            if not self.busy():
                self._sent = None
                return
            self._answered = False
            self._sent = now
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._answer)
            return
        if self._culprit is None and now - self._sent > self.threshold:
            self._culprit = self._running()
            run_id, step = self._culprit
            if run_id is None:
                # The worker's own code (starting up, a machine short of
                # CPU): nothing a workflow's author can change.
                log.debug("the event loop is slow to answer (%.1f s)", now - self._sent)
                self._culprit = None
                return
            log.warning(
                "the event loop is blocked (%.1f s so far) by run %s (%s): an async step must "
                "not block; await instead, or make it a plain def step (it runs on a thread). "
                "Every other run on this worker waits meanwhile",
                now - self._sent,
                run_id or "-",
                f"step {step}" if step else "workflow code",
                extra={"run_id": run_id, "step": step},
            )

    def _running(self) -> tuple[str | None, str | None]:
        """The run (and its step) whose task holds the loop now, if one does."""
        task = asyncio.current_task(self.loop)
        name = task.get_name() if task is not None else ""
        if not name.startswith(RUN_TASK_PREFIX):
            return None, None
        run_id = name[len(RUN_TASK_PREFIX) :]
        return run_id, self.step_of(run_id)


class StepsInFlight(Observer):
    """The step each run of this worker is executing, for the loop watch's warning."""

    def __init__(self) -> None:
        self.steps: dict[str, str] = {}

    def step_started(self, step: StepAttempt) -> Any:
        self.steps[step.task.run_id] = step.name
        return None

    def step_finished(
        self,
        step: StepAttempt,
        token: Any,
        status: str,
        seconds: float,
        error: BaseException | None,
    ) -> None:
        self.steps.pop(step.task.run_id, None)
