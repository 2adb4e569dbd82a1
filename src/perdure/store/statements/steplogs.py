"""The statements on the log records of step attempts: ``sql/queries/steplogs.sql``."""

from __future__ import annotations

from perdure.store.statement import Namespace, Row, Statement, all_rows


class StepLogStatements(Namespace):
    """The statements on step attempts' log records: ``statements.steplogs``."""

    def write(
        self,
        *,
        run_id: str,
        position: int,
        attempt: int,
        name: str,
        worker_id: str | None,
        status: str,
        records_json: str,
        truncated: bool,
    ) -> Statement[None]:
        """Record the log records (a JSON array) of one step attempt."""
        return self._build(
            "steplog_write",
            lambda found: None,
            run_id=run_id,
            position=position,
            attempt=attempt,
            name=name,
            worker_id=worker_id,
            status=status,
            records=self._build.seal(records_json),
            truncated=truncated,
        )

    def list(self, run_id: str, name: str | None = None) -> Statement[list[Row]]:
        """A run's step attempts' log records (of step ``name`` only, if given)."""
        return self._build("steplog_list", all_rows, run_id=run_id, name=name)
