"""The statements on a run's events and streams: ``sql/queries/{events,streams}.sql``."""

from __future__ import annotations

from perdure.store.statement import Namespace, Row, Statement, all_rows, first


class EventStatements(Namespace):
    """The statements on a run's events: ``statements.events``."""

    def get(self, run_id: str, key: str) -> Statement[Row | None]:
        """The latest value of a run's event ``key``."""
        return self._build("event_get", first(dict), run_id=run_id, key=key)

    def list(self, run_id: str) -> Statement[list[Row]]:
        """The events a run published, in the order it first set them."""
        return self._build("event_list", all_rows, run_id=run_id)


class StreamStatements(Namespace):
    """The statements on a run's streams: ``statements.streams``."""

    def read(self, run_id: str, key: str, after: int) -> Statement[list[Row]]:
        """Stream values after ``after``, with the run's status on every row."""
        return self._build("stream_read", all_rows, run_id=run_id, key=key, after=after)
