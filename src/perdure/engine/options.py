"""How a worker claims and holds work: ``WorkerOptions``, checked when made."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from perdure.engine import arguments
from perdure.engine.arguments import validate_name
from perdure.engine.job_options import ReaperOptions, RetentionOptions, StatusOptions, TickerOptions
from perdure.errors import ConfigurationError

#: Tasks due within this many seconds notify idle workers when written
#: (migration 0016): a worker's fallback poll never waits longer.
NOTIFY_HORIZON_SECONDS = 60.0

#: A worker's statement pool holds at most this many connections unless
#: ``pool_size`` says otherwise (fewer with a small concurrency).
DEFAULT_POOL_SIZE = 20


if TYPE_CHECKING:
    from collections.abc import Sequence

    from perdure.engine.observer import Observer

if sys.version_info >= (3, 12):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_POOL_SIZE",
    "NOTIFY_HORIZON_SECONDS",
    "Unpack",
    "WorkerArguments",
    "WorkerKeywords",
    "WorkerOptions",
]


class WorkerKeywords(TypedDict, total=False):
    """The options of ``WorkerOptions`` as keyword arguments (``app.worker(concurrency=8)``).

    Typed for checkers with ``**options: Unpack[WorkerKeywords]``; an unknown
    option or a bad value is still refused at run time with ConfigurationError.
    """

    concurrency: int
    queues: list[str] | None
    lease_seconds: float
    heartbeat_seconds: float | None
    poll_seconds: float
    idle_poll_seconds: float
    blocked_loop_seconds: float
    reap_seconds: float | None
    claim_batch: int
    shutdown_seconds: float
    worker_id: str | None
    exit_when_idle: bool
    detect_nondeterminism: bool
    prune_after: float | timedelta | None
    prune_archive: bool
    prune_batch: int
    maintenance_seconds: float
    connect_seconds: float
    pool_size: int | None


class WorkerArguments(WorkerKeywords, total=False):
    """All keyword arguments of ``app.worker``: the options and what observes the worker.

    What ``app.run_worker``, ``app.run_until_complete`` and
    ``perdure.testing.drain`` pass on to ``app.worker``.
    """

    metrics_port: int | None
    metrics_host: str
    tracing: bool | None
    tracer_provider: Any
    observers: Sequence[Observer]


@dataclass
class WorkerOptions:
    """How a worker claims and holds work. Every duration is in seconds."""

    concurrency: int = 64
    queues: list[str] | None = None
    lease_seconds: float = 30.0
    heartbeat_seconds: float | None = None
    #: The fallback poll while LISTEN is down (or a served queue has a global
    #: limit, whose freed slots are not notified).
    poll_seconds: float = 1.0
    #: The fallback poll while LISTEN works: notifications wake the worker,
    #: for tasks due now and within the next minute (migration 0016), so
    #: the poll is held to at most NOTIFY_HORIZON_SECONDS.
    idle_poll_seconds: float = 60.0
    #: Warn (and count it) when a step blocks the event loop longer than this.
    blocked_loop_seconds: float = 1.0
    reap_seconds: float | None = None
    #: Tasks one claim takes at most. Runs claimed together advance together
    #: and share their checkpoints' commits, so a claim takes every free slot
    #: up to this.
    claim_batch: int = 64
    shutdown_seconds: float = 30.0
    worker_id: str | None = None
    #: Stop once nothing is running and nothing is due now: the inline mode of
    #: perdure.testing.drain and App.run_until_complete (same code path).
    exit_when_idle: bool = False
    #: Report a workflow body's direct calls to the clock, randomness or UUIDs
    #: (engine.nondeterminism); on in perdure.testing.drain.
    detect_nondeterminism: bool = False
    #: Retention (engine/retention.py): delete runs that finished longer ago
    #: than this (seconds or a timedelta); None keeps them. Whatever the
    #: setting, the maintenance pass creates history's day partitions ahead.
    prune_after: float | None = None
    #: Move pruned runs to the archive tables instead of deleting them.
    prune_archive: bool = False
    #: Runs per retention batch (one short transaction each).
    prune_batch: int = 1000
    #: Seconds between maintenance passes (one worker at a time runs each).
    maintenance_seconds: float = 3600.0
    #: Seconds to wait at start for the database to accept connections.
    connect_seconds: float = 30.0
    #: The most statement connections the worker's pool holds; None:
    #: concurrency + 4, at most DEFAULT_POOL_SIZE. Plain ``def`` steps'
    #: ``ctx.transaction`` get a pool of half as many (at least 2), so a worker
    #: opens at most ``client_connections`` through the URL (a pooler's).
    pool_size: int | None = None

    def __post_init__(self) -> None:
        arguments.integer("concurrency", self.concurrency, minimum=1, maximum=10_000)
        if self.queues is not None:
            if isinstance(self.queues, str) or not isinstance(self.queues, list | tuple | set):
                raise ConfigurationError(
                    f"queues must be a list of queue names, not {self.queues!r}"
                )
            self.queues = [validate_name("queue", queue) for queue in self.queues]
        arguments.seconds("lease_seconds", self.lease_seconds, positive=True)
        arguments.seconds("idle_poll_seconds", self.idle_poll_seconds, positive=True)
        arguments.seconds("blocked_loop_seconds", self.blocked_loop_seconds, positive=True)
        arguments.seconds("shutdown_seconds", self.shutdown_seconds)
        arguments.seconds("connect_seconds", self.connect_seconds)
        arguments.optional_seconds("heartbeat_seconds", self.heartbeat_seconds, positive=True)
        arguments.integer("claim_batch", self.claim_batch, minimum=1, maximum=10_000)
        arguments.optional_text("worker_id", self.worker_id, max_length=200)
        arguments.flag("exit_when_idle", self.exit_when_idle)
        if self.pool_size is not None:
            arguments.integer("pool_size", self.pool_size, minimum=1, maximum=10_000)
        arguments.flag("detect_nondeterminism", self.detect_nondeterminism)
        # Each periodic job's options refuse a bad value of their own: made
        # once here, so that a bad option is refused when the worker is made.
        self.prune_after = self.retention.cutoff_seconds
        _ = (self.reaper, self.ticker, self.status)

    @property
    def statement_pool_size(self) -> int:
        """The most connections of the worker's statement pool."""
        return self.pool_size or min(self.concurrency + 4, DEFAULT_POOL_SIZE)

    @property
    def transaction_pool_size(self) -> int:
        """The most connections of plain ``def`` steps' ``ctx.transaction`` pool."""
        return max(2, self.statement_pool_size // 2)

    @property
    def client_connections(self) -> int:
        """The most connections the worker opens through its URL (a pooler's, if any)."""
        return self.statement_pool_size + self.transaction_pool_size

    @property
    def reaper(self) -> ReaperOptions:
        """The reaper's options (engine/housekeeping.py)."""
        return ReaperOptions(self.reap_seconds, self.lease_seconds)

    @property
    def ticker(self) -> TickerOptions:
        """The schedule ticker's options."""
        return TickerOptions(self.poll_seconds)

    @property
    def retention(self) -> RetentionOptions:
        """Retention's options."""
        return RetentionOptions(
            self.prune_after, self.prune_archive, self.prune_batch, self.maintenance_seconds
        )

    @property
    def status(self) -> StatusOptions:
        """The status report's options (not set by users: its defaults)."""
        return StatusOptions()

    @property
    def heartbeat_interval(self) -> float:
        """A third of the lease unless set: two heartbeats may fail before it lapses."""
        return self.heartbeat_seconds or self.lease_seconds / 3

    @property
    def idle_heartbeat_interval(self) -> float:
        """An idle worker beats only its row: every half lease (at least every beat interval)."""
        return max(self.heartbeat_interval, self.lease_seconds / 2)

    @property
    def reap_interval(self) -> float:
        """Half the lease unless set, at most 10 s."""
        return self.reaper.interval
