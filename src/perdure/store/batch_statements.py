"""Merge the checkpoints of many runs into one statement (``sql/queries/batch.sql``).

The worker's group commit hands :meth:`AsyncStore.execute_batch` units of
statements from different runs. The two kinds of the hot path, a completed
step's ``step_checkpoint`` and a run's ``run_complete_step``, are merged here:
all the units of one kind become one statement over arrays, whose answer has
one row per unit with the columns of the single statement, so each unit's own
decoder reads its row. Everything else runs as it is, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from perdure.store.statement import Row, Statement

T = TypeVar("T")
Unit = Sequence[Statement[Any]]


def _mergeable(stmt: Statement[Any]) -> bool:
    p = stmt.params
    if stmt.name == "run_complete_step":
        return True
    return (
        stmt.name == "step_checkpoint"
        and p["status"] == "completed"
        and p["kind"] == "step"
        and p["event_key"] is None
        and p["error"] is None
        and p["detail"] is None
    )


class BatchStatements:
    """The merged statements of the group commit; mixed into Statements."""

    #: The statement that merges many of each mergeable statement.
    MERGED = {
        "step_checkpoint": "step_checkpoint_many",
        "run_complete_step": "run_complete_step_many",
    }

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    def merge(self, statements: Sequence[Statement[Any]]) -> Statement[list[Row]]:
        """One statement doing the work of ``statements`` (all ``step_checkpoint`` or all
        ``run_complete_step``, each mergeable); its rows are theirs, in order."""
        first = statements[0].params
        columns: dict[str, list[Any]] = {
            "task_ids": [],
            "worker_ids": [],
            "attempts": [],
            "positions": [],
            "names": [],
            "step_attempts": [],
            "started": [],
        }
        for stmt in statements:
            p = stmt.params
            columns["task_ids"].append(p["task_id"])
            columns["worker_ids"].append(p["worker_id"])
            columns["attempts"].append(p["attempt"])
            columns["positions"].append(p["position"])
            columns["names"].append(p["name"])
            columns["step_attempts"].append(p["attempts"])
            columns["started"].append(p["started_at"])
        if statements[0].name == "step_checkpoint":
            columns["outputs"] = [s.params["output"] for s in statements]
            extra: dict[str, Any] = {"lease_seconds": first["lease_seconds"]}
        else:
            columns["kinds"] = [s.params["kind"] for s in statements]
            columns["step_outputs"] = [s.params["step_output"] for s in statements]
            columns["outputs"] = [s.params["output"] for s in statements]
            extra = {}
        return self._stmt(self.MERGED[statements[0].name], lambda found: found, **columns, **extra)


def combine(
    q: BatchStatements, units: Sequence[Unit]
) -> tuple[list[Statement[Any]], Callable[[list[Any]], list[list[Any]]]]:
    """The statements that do the work of ``units``, and how to split their results per unit.

    Units of one mergeable statement are merged by kind (when there are at
    least two of a kind); the others keep their statements, in unit order.
    """
    groups: dict[str, list[int]] = {}
    for index, unit in enumerate(units):
        if len(unit) == 1 and _mergeable(unit[0]):
            groups.setdefault(unit[0].name, []).append(index)
    merged = [members for members in groups.values() if len(members) > 1]
    in_merge = {index for members in merged for index in members}
    plain = [stmt for i, unit in enumerate(units) if i not in in_merge for stmt in unit]
    statements = plain + [q.merge([units[i][0] for i in members]) for members in merged]

    def split(results: list[Any]) -> list[list[Any]]:
        out: list[list[Any]] = [[] for _ in units]
        flat = iter(results[: len(plain)])
        for i, unit in enumerate(units):
            if i not in in_merge:
                out[i] = [next(flat) for _ in unit]
        for members, rows in zip(merged, results[len(plain) :], strict=True):
            for i, row in zip(members, rows, strict=True):
                out[i] = [units[i][0].decode([row])]
        return out

    return statements, split
