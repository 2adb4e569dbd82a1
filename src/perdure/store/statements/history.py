"""The statements on a run's history and its partitions: ``sql/queries/history.sql``."""

from __future__ import annotations

from datetime import datetime

from perdure.store import rows
from perdure.store.statement import Namespace, Row, Statement, all_rows, count
from perdure.types import HistoryEvent


class HistoryStatements(Namespace):
    """The statements on a run's history and its partitions: ``statements.history``."""

    def partition_list(self) -> Statement[list[Row]]:
        """The partitions of history: name, from_at, to_at, is_default."""
        return self._build("history_partition_list", all_rows)

    def partitions_ensure(self, days: int) -> Statement[int]:
        """Create missing day partitions from today to ``days`` ahead; how many."""
        return self._build("history_partitions_ensure", count("created"), days=days)

    def partition_drop(self, before: datetime) -> Statement[str | None]:
        """Drop the oldest partition that ends by ``before``; its name, or None."""
        return self._build(
            "history_partition_drop",
            lambda found: found[0]["name"] if found else None,
            before=before,
        )

    def default_prune(self, before: datetime, limit: int) -> Statement[None]:
        """Delete old entries of gone runs from the default partition (at most ``limit``)."""
        return self._build("history_default_prune", lambda found: None, before=before, limit=limit)

    def list_archived(self, run_id: str) -> Statement[list[HistoryEvent]]:
        """The history of an archived run, oldest first."""
        return self._build(
            "history_list_archived", lambda found: [rows.history(r) for r in found], run_id=run_id
        )

    def list(self, run_id: str) -> Statement[list[HistoryEvent]]:
        """A run's history, oldest first."""
        return self._build(
            "history_list", lambda found: [rows.history(r) for r in found], run_id=run_id
        )
