"""The worker's periodic jobs, each a type with its own options.

``Reaper`` (gives back work whose lease lapsed, cancels runs past their
deadline, marks silent workers lost) and ``Ticker`` (starts the runs of due
schedules) are the fleet's duties: only the duty holder runs them.
``Retention`` (history's partitions ahead, pruning) runs on every worker,
one at a time under the maintenance lock, and ``Status`` (how many runs
wait for a time, logged when it changes) on every worker. Each takes its
options (engine/job_options.py); ``services.Runner`` runs each job (start,
stop, duty, restart on failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from perdure.engine import maintenance, retention, schedules
from perdure.engine.job_options import ReaperOptions, RetentionOptions, StatusOptions, TickerOptions
from perdure.store.store import AsyncStore
from perdure.types import PruneResult

log = logging.getLogger("perdure.worker")


class Reaper:
    """The duty holder's reaper: reaps lapsed leases, enforces deadlines, marks silent workers."""

    name = "reaper"
    on_duty = True

    def __init__(
        self, store: AsyncStore, options: ReaperOptions, for_good: Callable[[int], None]
    ) -> None:
        """Reap in ``store``; ``for_good`` is told how many tasks each pass reaped for good."""
        self.store, self.options, self.for_good = store, options, for_good

    async def run(self) -> None:
        """Reap every interval until cancelled."""
        opts = self.options
        await maintenance.reaper_loop(self.store, opts.interval, opts.stale_seconds, self.for_good)


class Ticker:
    """The duty holder's schedule ticker."""

    name = "ticker"
    on_duty = True

    def __init__(
        self, store: AsyncStore, options: TickerOptions, nudge: schedules.Nudge | None = None
    ) -> None:
        """Tick the schedules of ``store``; ``nudge`` tells of schedules changed elsewhere."""
        self.store, self.options, self.nudge = store, options, nudge

    async def run(self) -> None:
        """Tick due schedules until cancelled."""
        await schedules.tick_loop(self.store, self.options.poll_seconds, self.nudge)


class Retention:
    """History's partitions ahead and, with ``prune_after``, pruning (every worker,
    one at a time under the maintenance lock)."""

    name = "retention"
    on_duty = False

    def __init__(
        self,
        store: AsyncStore,
        options: RetentionOptions,
        report: Callable[[PruneResult | None], None],
    ) -> None:
        """Keep the history of ``store``; ``report`` is told of each pass."""
        self.store, self.options, self.report = store, options, report

    async def run(self) -> None:
        """A pass now and every ``maintenance_seconds`` until cancelled."""
        opts = self.options
        await retention.maintenance_loop(
            self.store,
            interval=opts.maintenance_seconds,
            prune_after=opts.cutoff_seconds,
            archive=opts.prune_archive,
            batch_size=opts.prune_batch,
            report=self.report,
        )


class Status:
    """How many runs of the worker's queues wait for a time, and the next wake-up:
    logged when they change."""

    name = "status"
    on_duty = False

    def __init__(self, store: AsyncStore, queues: Sequence[str], options: StatusOptions) -> None:
        """Report on ``queues``."""
        self.store, self.queues, self.options = store, list(queues), options
        #: Runs waiting for a future time, and the next wake-up, as last seen.
        self.waiting = 0
        self.next_wake: datetime | None = None

    async def run(self) -> None:
        """Look every ``status_seconds`` until cancelled."""
        await maintenance.status_loop(
            self.store, self.queues, self.options.status_seconds, self._report
        )

    def _report(self, waiting: int, next_wake: datetime | None) -> None:
        if (waiting, next_wake) == (self.waiting, self.next_wake):
            return
        self.waiting, self.next_wake = waiting, next_wake
        when = next_wake.astimezone().strftime("%Y-%m-%d %H:%M:%S") if next_wake else "-"
        log.info("%d run(s) waiting in %s; next wake-up %s", waiting, ",".join(self.queues), when)
