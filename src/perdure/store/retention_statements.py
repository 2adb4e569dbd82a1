"""Statements of retention and of the archive: prune runs, manage history's partitions.

A mixin of :class:`~perdure.store.statements.Statements`: the queries live in
``sql/queries/retention.sql`` and ``sql/queries/archive.sql``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from perdure.store import rows
from perdure.store.statement import Row, Statement, count, first
from perdure.types import HistoryEvent, Run, Step

T = TypeVar("T")


class RetentionStatements:
    """The statements of retention and archived runs; mixed into Statements."""

    schema: str

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    # Pruning ------------------------------------------------------------------

    def run_prune(self, before: datetime, *, limit: int, archive: bool) -> Statement[int]:
        """Delete (or archive) one batch of runs finished before ``before``; how many."""
        return self._stmt("run_prune", count("pruned"), before=before, limit=limit, archive=archive)

    def run_prune_count(self, before: datetime) -> Statement[int]:
        """How many runs :meth:`run_prune` would take in all."""
        return self._stmt("run_prune_count", count("prunable"), before=before)

    def run_prune_cutoff(self, seconds: float) -> Statement[datetime]:
        """The time ``seconds`` before now, on the statements' clock."""
        return self._stmt("run_prune_cutoff", lambda found: found[0]["cutoff"], seconds=seconds)

    # History partitions ---------------------------------------------------------

    def history_partition_list(self) -> Statement[list[Row]]:
        """The partitions of history: name, from_at, to_at, is_default."""
        return self._stmt("history_partition_list", lambda found: found)

    def history_partitions_ensure(self, days: int) -> Statement[int]:
        """Create missing day partitions from today to ``days`` ahead; how many."""
        return self._stmt("history_partitions_ensure", count("created"), days=days)

    def history_partition_drop(self, before: datetime) -> Statement[str | None]:
        """Drop the oldest partition that ends by ``before``; its name, or None."""
        return self._stmt(
            "history_partition_drop",
            lambda found: found[0]["name"] if found else None,
            before=before,
        )

    def history_default_prune(self, before: datetime, limit: int) -> Statement[None]:
        """Delete old entries of gone runs from the default partition (at most ``limit``)."""
        return self._stmt("history_default_prune", lambda found: None, before=before, limit=limit)

    def worker_maintenance_lock(self) -> Statement[bool]:
        """Try to take this schema's maintenance lock (session-level); True if taken."""
        return self._stmt(
            "worker_maintenance_lock", lambda found: bool(found[0]["locked"]), schema=self.schema
        )

    def worker_maintenance_unlock(self) -> Statement[None]:
        """Release this schema's maintenance lock."""
        return self._stmt("worker_maintenance_unlock", lambda found: None, schema=self.schema)

    # Archived runs --------------------------------------------------------------

    def run_get_archived(self, run_id: str) -> Statement[Run | None]:
        """One archived run by id."""
        return self._stmt("run_get_archived", first(rows.run), run_id=run_id)

    def run_get_by_key_archived(self, key: str) -> Statement[Run | None]:
        """The newest archived run with ``key``."""
        return self._stmt("run_get_by_key_archived", first(rows.run), key=key)

    def step_list_archived(self, run_id: str) -> Statement[list[Step]]:
        """The checkpoints of an archived run, in position order."""
        return self._stmt(
            "step_list_archived", lambda found: [rows.step(r) for r in found], run_id=run_id
        )

    def history_list_archived(self, run_id: str) -> Statement[list[HistoryEvent]]:
        """The history of an archived run, oldest first."""
        return self._stmt(
            "history_list_archived", lambda found: [rows.history(r) for r in found], run_id=run_id
        )
