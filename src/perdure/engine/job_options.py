"""The options of the worker's periodic jobs (engine/housekeeping.py), each checked when made.

Each field is named after the option users set on ``app.worker(...)``
(``WorkerOptions``, which makes these from its own; only the status
report's interval is not a user's), and a bad value is refused with
ConfigurationError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from perdure.engine import arguments


@dataclass(frozen=True)
class ReaperOptions:
    """How often the reaper looks, and when a silent worker counts as lost."""

    #: Seconds between two passes; None: half the lease, at most 10 s.
    reap_seconds: float | None = None
    lease_seconds: float = 30.0

    def __post_init__(self) -> None:
        arguments.optional_seconds("reap_seconds", self.reap_seconds, positive=True)
        arguments.seconds("lease_seconds", self.lease_seconds, positive=True)

    @property
    def interval(self) -> float:
        """Seconds between two passes."""
        return self.reap_seconds or min(self.lease_seconds / 2, 10.0)

    @property
    def stale_seconds(self) -> float:
        """A worker silent for two leases is marked lost."""
        return self.lease_seconds * 2


@dataclass(frozen=True)
class TickerOptions:
    """How soon a schedule added, changed or resumed elsewhere is seen."""

    poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        arguments.seconds("poll_seconds", self.poll_seconds, positive=True)


@dataclass(frozen=True)
class RetentionOptions:
    """What retention keeps, and how often it looks (engine/retention.py)."""

    #: Delete runs finished longer ago than this (seconds or a timedelta); None keeps them.
    prune_after: float | timedelta | None = None
    #: Move pruned runs to the archive tables instead of deleting them.
    prune_archive: bool = False
    #: Runs per batch (one short transaction each).
    prune_batch: int = 1000
    #: Seconds between two passes.
    maintenance_seconds: float = 3600.0

    def __post_init__(self) -> None:
        after = arguments.optional_seconds("prune_after", self.prune_after, positive=True)
        object.__setattr__(self, "prune_after", after)
        arguments.flag("prune_archive", self.prune_archive)
        arguments.integer("prune_batch", self.prune_batch, minimum=1, maximum=100_000)
        arguments.seconds("maintenance_seconds", self.maintenance_seconds, positive=True)

    @property
    def cutoff_seconds(self) -> float | None:
        """``prune_after`` in seconds (a timedelta was made seconds when checked)."""
        after = self.prune_after
        return after.total_seconds() if isinstance(after, timedelta) else after


@dataclass(frozen=True)
class StatusOptions:
    """How often the status report looks at the runs waiting for a time."""

    status_seconds: float = 60.0

    def __post_init__(self) -> None:
        arguments.seconds("status_seconds", self.status_seconds, positive=True)
