"""The statements on workers and the maintenance lock: ``sql/queries/workers.sql``."""

from __future__ import annotations

from collections.abc import Sequence

from perdure.store import rows, versions
from perdure.store.statement import Namespace, Statement
from perdure.types import WorkerInfo


class WorkerStatements(Namespace):
    """The statements on workers and the maintenance lock: ``statements.workers``."""

    def register(
        self,
        *,
        worker_id: str,
        host: str,
        pid: int,
        queues: Sequence[str],
        workflows: Sequence[str],
        concurrency: int,
    ) -> Statement[None]:
        """Announce a worker, with the schema version and release of its code."""
        return self._build(
            "worker_register",
            lambda found: None,
            worker_id=worker_id,
            host=host,
            pid=pid,
            queues=list(queues),
            workflows=list(workflows),
            concurrency=concurrency,
            schema_version=versions.code_schema_version(),
            release=versions.release(),
        )

    def stop(self, worker_id: str) -> Statement[None]:
        """Mark a worker stopped."""
        return self._build("worker_stop", lambda found: None, worker_id=worker_id)

    def report_stuck(self, worker_id: str, stuck: int) -> Statement[None]:
        """Record how many of a worker's threads are stuck."""
        return self._build(
            "worker_report_stuck", lambda found: None, worker_id=worker_id, stuck=stuck
        )

    def beat(
        self, worker_id: str, fresh_seconds: float, listening: bool = True
    ) -> Statement[tuple[int, dict[str, int]]]:
        """Mark the worker alive, and whether it listens on its own channel; its rank
        among the live workers, and by queue among those serving each of its queues
        (see worker_beat)."""
        return self._build(
            "worker_beat",
            lambda found: (int(found[0]["rank"]), dict(found[0]["queue_ranks"] or {})),
            worker_id=worker_id,
            fresh_seconds=fresh_seconds,
            listening=listening,
        )

    def server_connections(self, name: str) -> Statement[tuple[int, int, int, int]]:
        """The server's max_connections, those reserved for superusers, the client
        connections open now, and those of the worker named ``name`` (see
        worker_server_connections)."""
        return self._build(
            "worker_server_connections",
            lambda found: (
                int(found[0]["allowed"]),
                int(found[0]["reserved"]),
                int(found[0]["used"]),
                int(found[0]["own"]),
            ),
            name=name,
        )

    def next_worker(
        self, worker_id: str, queues: list[str], fresh_seconds: float
    ) -> Statement[str | None]:
        """The next live worker after ``worker_id`` serving one of ``queues`` (see worker_next)."""
        return self._build(
            "worker_next",
            lambda found: found[0]["next"] if found else None,
            worker_id=worker_id,
            queues=queues,
            fresh_seconds=fresh_seconds,
        )

    def mark_lost(self, stale_seconds: float) -> Statement[None]:
        """Mark workers with stale heartbeats as lost."""
        return self._build("worker_mark_lost", lambda found: None, stale_seconds=stale_seconds)

    def maintenance_lock(self) -> Statement[bool]:
        """Try to take this schema's maintenance lock (session-level); True if taken."""
        return self._build(
            "worker_maintenance_lock",
            lambda found: bool(found[0]["locked"]),
            schema=self._build.schema,
        )

    def maintenance_unlock(self) -> Statement[None]:
        """Release this schema's maintenance lock."""
        return self._build(
            "worker_maintenance_unlock", lambda found: None, schema=self._build.schema
        )

    def list(self, limit: int = 100) -> Statement[list[WorkerInfo]]:
        """Workers, most recently seen first."""
        return self._build(
            "worker_list", lambda found: [rows.worker(r) for r in found], limit=limit
        )
