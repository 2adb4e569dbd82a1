"""Statements of workflow management: bulk selection, restart and fork.

A mixin of :class:`~perdure.store.statements.Statements`: the queries live in
``sql/queries/manage.sql``. Bulk cancel and retry act through ``run_cancel``
and ``run_retry``, which take a list of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from perdure.store.statement import Row, Statement, first
from perdure.types import RunRef, RunStatus

T = TypeVar("T")


def _ref(r: Row) -> RunRef:
    return RunRef(
        id=str(r["id"]),
        workflow=r["workflow"],
        version=r["version"],
        status=RunStatus(r["status"]),
        key=r["key"],
        created_at=r["created_at"],
    )


class ManageStatements:
    """The statements of restart, fork and bulk operations; mixed into Statements."""

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    def run_select(
        self,
        *,
        statuses: Sequence[str],
        filters: dict[str, Any],
        after: RunRef | None,
        limit: int,
    ) -> Statement[list[RunRef]]:
        """A page of runs in ``statuses`` matching ``filters``, newest first, after ``after``.

        ``filters`` holds the criteria of ``run_list`` but the status (each
        None to skip it; ``ids`` the given runs), as
        :meth:`perdure.RunFilter.params` gives them.
        """
        after_at: datetime | None = None if after is None else after.created_at
        return self._stmt(
            "run_select",
            lambda found: [_ref(r) for r in found],
            statuses=list(statuses),
            after_at=after_at,
            after_id=None if after is None else after.id,
            limit=limit,
            **filters,
        )

    def run_copy(
        self,
        *,
        source_id: str,
        run_id: str,
        key: str | None,
        priority: int,
        fork_step: str | None = None,
        positions: Sequence[int] = (),
    ) -> Statement[Row | None]:
        """Start run ``run_id`` from run ``source_id``: a restart, or with ``fork_step`` a
        fork that copies the checkpoints at ``positions``. The row has ``id``,
        ``workflow``, ``created`` (False: ``key`` named an existing run) and ``copied``."""
        return self._stmt(
            "run_copy",
            first(dict),
            source_id=source_id,
            run_id=run_id,
            key=key,
            priority=priority,
            fork_step=fork_step,
            positions=list(positions),
        )
