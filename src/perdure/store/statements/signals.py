"""The statements on signals: ``sql/queries/signals.sql``."""

from __future__ import annotations

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Namespace, Row, Statement, all_rows


class SignalStatements(Namespace):
    """The statements on signals: ``statements.signals``."""

    def take(self, fence: Fence, *, position: int, name: str, step_name: str) -> Statement[Fenced]:
        """Consume the oldest pending signal ``name`` into the wait at ``position``;
        ``written`` if one was taken, with its ``payload``, and the statement's time."""
        return self._build(
            "signal_take",
            Fenced.decode,
            position=position,
            name=name,
            step_name=step_name,
            **fence.params(),
        )

    def take_gate(self, run_id: str, *, position: int, name: str, signal: str) -> Statement[Row]:
        """The signal that opens the gate at ``position`` (found, payload, db_now)."""
        return self._build(
            "signal_take_gate",
            lambda found: found[0],
            run_id=run_id,
            position=position,
            name=name,
            signal=signal,
        )

    def list(self, run_id: str, signal_id: int | None = None) -> Statement[list[Row]]:
        """The signals a run received (only the one ``signal_id`` when given)."""
        return self._build("signal_list", all_rows, run_id=run_id, signal_id=signal_id)
