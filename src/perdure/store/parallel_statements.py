"""Statements for parallel steps, graph workflows, child runs and compensation.

A mixin of :class:`~perdure.store.statements.Statements`: the queries live in
``sql/queries/parallel.sql``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Row, Statement, count, first

T = TypeVar("T")


class ParallelStatements:
    """The statements of the parallel shapes; mixed into Statements."""

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        raise NotImplementedError  # provided by Statements

    def step_fanout(
        self,
        fence: Fence,
        *,
        positions: Sequence[int],
        names: Sequence[str],
        seconds: float,
        waiting_for_json: str,
        gather_start: int,
    ) -> Statement[Fenced]:
        """Park a run at a gather and spawn its parallel steps; (leased, spawned)."""
        return self._stmt(
            "step_fanout",
            Fenced.decode,
            gather_start=gather_start,
            positions=list(positions),
            names=list(names),
            seconds=seconds,
            waiting_for=waiting_for_json,
            **fence.params(),
        )

    def step_complete_parallel(
        self,
        fence: Fence,
        *,
        position: int,
        name: str,
        kind: str,
        status: str,
        attempts: int,
        output_json: str | None,
        error_json: str | None,
        started_at: datetime,
        event: str,
        wake: bool,
    ) -> Statement[Fenced]:
        """Checkpoint a parallel step and delete its task; (leased, written, run status)."""
        return self._stmt(
            "step_complete_parallel",
            Fenced.decode,
            position=position,
            name=name,
            kind=kind,
            status=status,
            attempts=attempts,
            output=output_json,
            error=error_json,
            started_at=started_at,
            event=event,
            wake=wake,
            **fence.params(),
        )

    def task_finish(self, fence: Fence) -> Statement[bool]:
        """Delete a held task whose work is done (fenced); False if the lease is gone."""
        return self._stmt("task_finish", lambda found: bool(found), **fence.params())

    def step_schedule(
        self, run_id: str, positions: Sequence[int], names: Sequence[str], kinds: Sequence[str]
    ) -> Statement[int]:
        """Make graph steps claimable; how many tasks were created."""
        return self._stmt(
            "step_schedule",
            count("spawned"),
            run_id=run_id,
            positions=list(positions),
            names=list(names),
            kinds=list(kinds),
        )

    def step_record(
        self,
        run_id: str,
        *,
        position: int,
        name: str,
        kind: str,
        status: str,
        output_json: str | None = None,
        error_json: str | None = None,
    ) -> Statement[None]:
        """Record a final step row nobody executed (skipped, or failed by its condition)."""
        return self._stmt(
            "step_record",
            lambda found: None,
            run_id=run_id,
            position=position,
            name=name,
            kind=kind,
            status=status,
            output=output_json,
            error=error_json,
        )

    def run_halt_steps(self, run_id: str, task_id: int) -> Statement[int]:
        """Cancel graph steps not started; how many others are still being executed."""
        return self._stmt("run_halt_steps", count("running"), run_id=run_id, task_id=task_id)

    def run_mark_compensating(self, run_id: str, error_json: str) -> Statement[None]:
        """Mark a graph run compensating, keeping ``error_json`` as its error."""
        return self._stmt(
            "run_mark_compensating", lambda found: None, run_id=run_id, error=error_json
        )

    def run_progress(self, run_id: str) -> Statement[None]:
        """A graph run that was queued or waiting is running again."""
        return self._stmt("run_progress", lambda found: None, run_id=run_id)

    def run_finish(
        self,
        run_id: str,
        status: str,
        *,
        output_json: str | None = None,
        error_json: str | None = None,
    ) -> Statement[int]:
        """End a graph run with ``status``; 1 if this call ended it."""
        return self._stmt(
            "run_finish",
            count("changed"),
            run_id=run_id,
            status=status,
            output=output_json,
            error=error_json,
        )

    def step_gate_park(
        self, fence: Fence, *, position: int, name: str, signal: str, seconds: float
    ) -> Statement[Fenced]:
        """Park a graph step at its gate until signal ``signal``; (leased, wake time)."""
        return self._stmt(
            "step_gate_park",
            Fenced.decode,
            position=position,
            name=name,
            signal=signal,
            seconds=seconds,
            **fence.params(),
        )

    def signal_take_gate(
        self, run_id: str, *, position: int, name: str, signal: str
    ) -> Statement[Row]:
        """The signal that opens the gate at ``position`` (found, payload, db_now)."""
        return self._stmt(
            "signal_take_gate",
            lambda found: found[0],
            run_id=run_id,
            position=position,
            name=name,
            signal=signal,
        )

    def run_child_status(self, run_id: str) -> Statement[Row | None]:
        """A child run's status, output and error, its row locked (shared)."""
        return self._stmt("run_child_status", first(dict), run_id=run_id)
