"""Merge the checkpoints of many runs into one statement (``sql/queries/batch.sql``).

The worker's group commit hands ``AsyncStore.execute_batch`` units of
statements from different runs. The two kinds of the hot path, a completed
step's ``step_checkpoint`` and a run's ``run_complete_step`` (written as a
``run_complete_step_many`` of one run), are merged here:
all the units of one kind become one statement over arrays, whose answer has
one row per unit with the columns of the single statement, so each unit's own
decoder reads its row. Everything else runs as it is, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Namespace, Row, Statement

T = TypeVar("T")
Unit = Sequence[Statement[Any]]


def _mergeable(stmt: Statement[Any]) -> bool:
    p = stmt.params
    if stmt.name == "run_complete_step_many":
        return True
    return (
        stmt.name == "step_checkpoint"
        and p["status"] == "completed"
        and p["kind"] == "step"
        and p["event_key"] is None
        and p["error"] is None
        and p["detail"] is None
    )


class BatchStatements(Namespace):
    """The merged statements of the group commit: ``statements.batch``."""

    def run_complete_step(
        self, fence: Fence, output_json: str, step: Statement[Any]
    ) -> Statement[Fenced]:
        """Write the completed-step checkpoint ``step`` and finish the run, in one statement.

        ``step`` is the ``step_checkpoint`` statement that would have been
        written alone. The statement is ``run_complete_step_many`` for this
        one run, so that the group commit merges it with others' by joining
        their arrays. Returns (leased, written, changed).
        """
        p = step.params
        return self._build(
            "run_complete_step_many",
            Fenced.decode,
            task_ids=[fence.task_id],
            worker_ids=[fence.worker_id],
            attempts=[fence.attempt],
            positions=[p["position"]],
            names=[p["name"]],
            kinds=[p["kind"]],
            step_attempts=[p["attempts"]],
            step_outputs=[p["output"]],
            started=[p["started_at"]],
            outputs=[output_json],
        )

    def merge(self, statements: Sequence[Statement[Any]]) -> Statement[list[Row]]:
        """One statement doing the work of ``statements`` (all completed-step
        ``step_checkpoint`` or all ``run_complete_step_many``); its rows are
        theirs, in order."""
        if statements[0].name == "run_complete_step_many":
            arrays = {
                key: [item for stmt in statements for item in stmt.params[key]]
                for key, value in statements[0].params.items()
                if isinstance(value, list)
            }
            return self._build("run_complete_step_many", lambda found: found, **arrays)
        first = statements[0].params
        columns = {
            "task_ids": "task_id",
            "worker_ids": "worker_id",
            "attempts": "attempt",
            "positions": "position",
            "names": "name",
            "step_attempts": "attempts",
            "started": "started_at",
            "outputs": "output",
        }
        arrays = {key: [s.params[name] for s in statements] for key, name in columns.items()}
        return self._build(
            "step_checkpoint_many",
            lambda found: found,
            lease_seconds=first["lease_seconds"],
            **arrays,
        )


def combine(
    q: BatchStatements, units: Sequence[Unit]
) -> tuple[list[Statement[Any]], Callable[[list[Any]], list[list[Any]]]]:
    """The statements that do the work of ``units``, and how to split their results per unit.

    Units of one mergeable statement are merged by kind (when there are at
    least two of a kind); the others keep their statements, in unit order.
    The merged statements run after the others: each unit's statements are
    all in one part or the other, and units of different runs do not depend
    on each other's order.
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
