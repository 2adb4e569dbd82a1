"""The statements on queue settings: ``sql/queries/queues.sql``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from perdure.errors import ConfigurationError
from perdure.store import rows
from perdure.store.statement import Namespace, Statement
from perdure.types import QueueInfo

#: The payload prefix of a worker's call to the others (queue_wake), before its id.
WAKE_PREFIX = "worker:"

#: The columns of a queue's settings that ``queues.set`` writes, and the flag
#: that says each is stated. ``rate_limit`` and ``rate_period`` go together.
SETTING_FLAGS = {
    "concurrency": "set_concurrency",
    "worker_concurrency": "set_worker_concurrency",
    "partition_concurrency": "set_partition_concurrency",
    "rate_limit": "set_rate",
    "rate_period": "set_rate",
    "rate_per_key": "set_rate_per_key",
}


class QueueStatements(Namespace):
    """The statements on queue settings: ``statements.queues``."""

    def lock(self, queues: Sequence[str]) -> Statement[list[tuple[str, bool]]]:
        """Lock the queues among ``queues`` with a limit counted across workers.

        In a transaction; returns (name, throttled) in name order, throttled
        being True for a queue with a partition or rate limit.
        """
        return self._build(
            "queue_lock",
            lambda found: [(r["name"], bool(r["throttled"])) for r in found],
            queues=list(queues),
        )

    def set(self, name: str, settings: Mapping[str, Any]) -> Statement[bool]:
        """Write the settings in ``settings`` (others are kept); True if anything changed.

        ``settings`` maps column names of ``SETTING_FLAGS`` to their value
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
        return self._build(
            "queue_set", lambda found: bool(found), name=name, channel=self._build.channel, **params
        )

    @staticmethod
    def wake_payload(worker_id: str) -> str:
        """The payload of ``wake`` sent by ``worker_id``: its own listener ignores it."""
        return f"{WAKE_PREFIX}{worker_id}"

    def worker_channel(self, worker_id: str) -> str:
        """The channel only ``worker_id`` LISTENs on: a call passed on to it by another
        worker of its queues (under PostgreSQL's 63-byte limit, whatever the id)."""
        digest = hashlib.sha1(f"{self._build.schema}:{worker_id}".encode()).hexdigest()
        return f"perdure_w_{digest[:24]}"

    def forward(self, worker_id: str, payload: str) -> Statement[None]:
        """Pass a call on to ``worker_id`` alone (its own channel; see queue_wake)."""
        return self._build(
            "queue_wake",
            lambda found: None,
            channel=self.worker_channel(worker_id),
            payload=payload,
        )

    def wake(self, worker_id: str) -> Statement[None]:
        """Wake the other workers for work no trigger announces (see queue_wake)."""
        return self._build(
            "queue_wake",
            lambda found: None,
            channel=self._build.channel,
            payload=self.wake_payload(worker_id),
        )

    def list(self, name: str | None = None) -> Statement[list[QueueInfo]]:
        """Every known queue (or the one named) with its limits and task counts."""
        return self._build("queue_list", lambda found: [rows.queue(r) for r in found], name=name)
