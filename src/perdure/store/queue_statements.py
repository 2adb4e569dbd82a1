"""Statements for queue settings and for claims from throttled queues.

A mixin of :class:`~perdure.store.statements.Statements`: the queries live in
``sql/queries/queue.sql`` (settings, locks, listing) and
``sql/queries/throttle.sql`` (the claim for queues with a partition or rate
limit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from perdure.errors import ConfigurationError
from perdure.store import rows
from perdure.store.rows import Queueing, StartResult
from perdure.store.statement import Row, Statement, first
from perdure.types import QueueInfo

T = TypeVar("T")

#: The columns of a queue's settings that ``queue_set`` writes, and the flag
#: that says each is stated. ``rate_limit`` and ``rate_period`` go together.
SETTING_FLAGS = {
    "concurrency": "set_concurrency",
    "worker_concurrency": "set_worker_concurrency",
    "partition_concurrency": "set_partition_concurrency",
    "rate_limit": "set_rate",
    "rate_period": "set_rate",
    "rate_per_key": "set_rate_per_key",
}


class QueueStatements:
    """The statements on queues; mixed into Statements."""

    channel: str

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    def queue_lock(self, queues: Sequence[str]) -> Statement[list[tuple[str, bool]]]:
        """Lock the queues among ``queues`` with a limit counted across workers.

        In a transaction; returns (name, throttled) in name order, throttled
        being True for a queue with a partition or rate limit.
        """
        return self._stmt(
            "queue_lock",
            lambda found: [(r["name"], bool(r["throttled"])) for r in found],
            queues=list(queues),
        )

    def queue_set(self, name: str, settings: Mapping[str, Any]) -> Statement[bool]:
        """Write the settings in ``settings`` (others are kept); True if anything changed.

        ``settings`` maps column names of :data:`SETTING_FLAGS` to their value
        (None for no limit); ``rate_limit`` and ``rate_period`` come together.
        """
        unknown = set(settings) - set(SETTING_FLAGS)
        if unknown:
            raise ConfigurationError(f"unknown queue settings: {', '.join(sorted(unknown))}")
        if ("rate_limit" in settings) != ("rate_period" in settings):
            raise ConfigurationError("rate_limit and rate_period are set together")
        params: dict[str, Any] = {column: settings.get(column) for column in SETTING_FLAGS}
        for column, flag in SETTING_FLAGS.items():
            params[flag] = params.get(flag, False) or column in settings
        return self._stmt(
            "queue_set", lambda found: bool(found), name=name, channel=self.channel, **params
        )

    def queue_list(self, name: str | None = None) -> Statement[list[QueueInfo]]:
        """Every known queue (or the one named) with its limits and task counts."""
        return self._stmt("queue_list", lambda found: [rows.queue(r) for r in found], name=name)

    def run_debounce(
        self,
        *,
        workflow: str,
        queue: str,
        key: str | None,
        input_json: str,
        queueing: Queueing,
    ) -> Statement[StartResult | None]:
        """Give the not yet started run with ``key`` (or dedup key) the latest input."""
        return self._stmt(
            "run_debounce",
            first(rows.start_result),
            workflow=workflow,
            queue=queue,
            key=key,
            dedup_key=queueing.dedup_key,
            input=input_json,
            tags=queueing.tags_json,
        )

    def task_next_due_throttled(
        self, queues: Sequence[str], names: Sequence[str], versions: Sequence[int]
    ) -> Statement[float | None]:
        """Seconds until a task of these throttled queues is due or a rate window moves."""
        return self._stmt(
            "task_next_due_throttled",
            lambda found: found[0]["seconds"] if found else None,
            queues=list(queues),
            names=list(names),
            versions=list(versions),
        )
