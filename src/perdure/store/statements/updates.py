"""The statements on updates: ``sql/queries/updates.sql``."""

from __future__ import annotations

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Namespace, Row, Statement, all_rows


class UpdateStatements(Namespace):
    """The statements on updates: ``statements.updates``."""

    def request(self, run_id: str, update_id: str, name: str, payload_json: str) -> Statement[Row]:
        """Record an update request unless its id exists, and wake the run if it waits
        (run_status, inserted, woken)."""
        return self._build(
            "update_request",
            lambda found: found[0],
            run_id=run_id,
            update_id=update_id,
            name=name,
            payload=self._build.seal(payload_json),
        )

    def get(self, run_id: str, update_id: str) -> Statement[Row | None]:
        """One update of a run with the run's status (None: no such run)."""
        return self._build(
            "update_get",
            lambda found: found[0] if found else None,
            run_id=run_id,
            update_id=update_id,
        )

    def of_run(self, run_id: str) -> Statement[list[Row]]:
        """The updates of a run, in the order they were requested."""
        return self._build("update_list", all_rows, run_id=run_id)

    def applied(self, run_id: str) -> Statement[list[Row]]:
        """The updates a run accepted, by wait position and order there."""
        return self._build("update_applied", all_rows, run_id=run_id)

    def requested(self, run_id: str) -> Statement[list[Row]]:
        """The requests a run has not decided yet, oldest first."""
        return self._build("update_requested", all_rows, run_id=run_id)

    def reject(self, update_row_id: int, error_json: str) -> Statement[list[Row]]:
        """Refuse a request (its row only); one row if it was still undecided."""
        return self._build(
            "update_reject", all_rows, id=update_row_id, error=self._build.seal(error_json)
        )

    def accept(
        self, fence: Fence, update_row_id: int, *, position: int, seq: int
    ) -> Statement[Fenced]:
        """Accept a request at the wait at ``position``, ``seq``-th there. Fenced."""
        return self._build(
            "update_accept",
            Fenced.decode,
            id=update_row_id,
            position=position,
            seq=seq,
            **fence.params(),
        )

    def reply(
        self,
        fence: Fence,
        update_row_id: int,
        *,
        status: str,
        result_json: str | None,
        error_json: str | None,
    ) -> Statement[Fenced]:
        """Store an accepted update's reply ('completed' or 'failed'). Fenced."""
        return self._build(
            "update_reply",
            Fenced.decode,
            id=update_row_id,
            status=status,
            result=self._build.seal(result_json),
            error=self._build.seal(error_json),
            **fence.params(),
        )
