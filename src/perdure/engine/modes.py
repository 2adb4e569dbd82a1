"""How long a worker serves, and with which jobs: until stopped, or inline until nothing is due.

``Serving`` is a worker process's mode: the status report, the reaper,
the schedule ticker and retention run beside the claim loop, which serves
until a stop is requested. ``Inline`` is the mode of
``perdure.testing.drain`` and ``App.run_until_complete``
(``exit_when_idle``): the same claim loop, but it reaps lapsed leases
before each claim (a test's simulated crash is not left to the reaper's
schedule), does not count stuck threads as taken slots, and returns once
nothing runs and nothing is due; no ticker and no retention.
"""

from __future__ import annotations

from collections.abc import Sequence

from perdure.engine.housekeeping import Reaper, Retention, Status, Ticker
from perdure.engine.observer import Observer
from perdure.engine.options import WorkerOptions
from perdure.engine.schedules import Nudge
from perdure.engine.services import Job
from perdure.store.store import AsyncStore


class Serving:
    """Serve until stopped, with every periodic job."""

    #: A stuck thread holds the slot of the step it ran (engine/threads.py).
    counts_stuck_threads = True

    def __init__(self, options: WorkerOptions, queues: Sequence[str], observer: Observer) -> None:
        """The mode of a worker with ``options`` serving ``queues``."""
        self.options = options
        self.queues = list(queues)
        self.observer = observer

    def jobs(self, store: AsyncStore, nudge: Nudge | None = None) -> list[Job]:
        """The periodic jobs beside the claim loop (``nudge``: the ticker's, see
        engine/schedules.py)."""
        opts = self.options
        return [
            *self._essential(store),
            Ticker(store, opts.ticker, nudge),
            Retention(store, opts.retention, self.observer.maintenance_pass),
        ]

    def _essential(self, store: AsyncStore) -> list[Job]:
        """The jobs of every mode: the status report and the reaper."""
        return [
            Status(store, self.queues, self.options.status),
            Reaper(store, self.options.reaper, self.observer.reaped_for_good),
        ]

    async def before_claim(self, store: AsyncStore) -> None:
        """What the claim loop does before each claim: nothing."""

    def finished(self, *, idle: bool, due: float | None) -> bool:
        """Whether the claim loop returns: never, it serves until stopped."""
        return False


class Inline(Serving):
    """Serve until nothing runs and nothing is due (``exit_when_idle``)."""

    #: It stops once nothing is due: it does not wait for a stuck thread.
    counts_stuck_threads = False

    def jobs(self, store: AsyncStore, nudge: Nudge | None = None) -> list[Job]:
        """The status report and the reaper only."""
        return self._essential(store)

    async def before_claim(self, store: AsyncStore) -> None:
        """Reap lapsed leases (a test's simulated crash) before each claim."""
        _, for_good = await store.execute(store.statements.tasks.reap(limit=500))
        if for_good:
            self.observer.reaped_for_good(for_good)

    def finished(self, *, idle: bool, due: float | None) -> bool:
        """Once nothing runs and nothing is due now."""
        return idle and (due is None or due > 0)


def mode(options: WorkerOptions, queues: Sequence[str], observer: Observer) -> Serving:
    """The mode ``options`` ask for."""
    kind = Inline if options.exit_when_idle else Serving
    return kind(options, queues, observer)
