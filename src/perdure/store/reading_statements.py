"""Statements of the observability reads: counts of runs, activity, held work.

A mixin of :class:`~perdure.store.statements.Statements`: the queries live in
``sql/queries/reading.sql``. They serve the dashboard and anyone who wants
the same views from code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from perdure.store import rows
from perdure.store.statement import Row, Statement
from perdure.types import WorkflowInfo

T = TypeVar("T")


def _all_rows(found: list[Row]) -> list[Row]:
    return found


def _counts(found: list[Row]) -> dict[str, int]:
    return {r["status"]: int(r["n"]) for r in found}


class ReadingStatements:
    """The statements of the observability reads; mixed into Statements."""

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    def run_count_by_status(
        self, filters: Mapping[str, Any], statuses: Sequence[str], cap: int
    ) -> Statement[dict[str, int]]:
        """How many runs of each status match ``filters``, each count stopping at ``cap``.

        ``filters`` are the criteria :meth:`perdure.RunFilter.params` gives.
        Planned with its values (never prepared), as ``run_list`` is.
        """
        stmt = self._stmt(
            "run_count_by_status", _counts, statuses=list(statuses), cap=cap, **filters
        )
        return replace(stmt, prepare=False)

    def run_count_recent(self, filters: Mapping[str, Any], cap: int) -> Statement[dict[str, int]]:
        """How many of the newest ``cap`` runs matching ``filters`` are in each status.

        ``filters`` as for :meth:`run_count_by_status`.
        """
        stmt = self._stmt("run_count_recent", _counts, cap=cap, **filters)
        return replace(stmt, prepare=False)

    def run_activity(self, since: datetime, bucket_seconds: float) -> Statement[list[Row]]:
        """Runs created since ``since`` per (bucket, status): rows of bucket, status, n."""
        return self._stmt("run_activity", _all_rows, since=since, bucket_seconds=bucket_seconds)

    def task_list_claimed(self, limit: int = 1000) -> Statement[list[Row]]:
        """The tasks workers hold now, by worker, oldest claim first."""
        return self._stmt("task_list_claimed", _all_rows, limit=limit)

    def event_list(self, run_id: str) -> Statement[list[Row]]:
        """The events a run published, in the order it first set them."""
        return self._stmt("event_list", _all_rows, run_id=run_id)

    def workflow_list_registered(self) -> Statement[list[WorkflowInfo]]:
        """Every registered workflow version with its definition (counts left empty)."""
        return self._stmt(
            "workflow_list_registered", lambda found: [rows.workflow(r) for r in found]
        )
