"""The statements on schedules: ``sql/queries/schedules.sql``."""

from __future__ import annotations

from datetime import datetime

from perdure.store import rows
from perdure.store.statement import Namespace, Row, Statement, first
from perdure.types import ScheduleInfo

#: The payload on the wakeup channel that tells the ticker a schedule changed
#: (no queue name starts with "!").
SCHEDULES_PAYLOAD = "!schedules"


def _due(found: list[Row]) -> tuple[list[str], float | None]:
    row = found[0]
    return list(row["due"]), row["seconds"]


class ScheduleStatements(Namespace):
    """The statements on schedules: ``statements.schedules``."""

    def upsert(
        self,
        *,
        name: str,
        cron: str,
        timezone: str,
        workflow: str,
        input_json: str,
        catchup: str,
        max_catchup: int,
        source: str,
        next_tick: datetime,
    ) -> Statement[ScheduleInfo]:
        """Record a schedule; its next tick changes only with its cron or time zone.
        The upsert returns the row, changed or not."""
        return self._build(
            "schedule_upsert",
            lambda found: rows.schedule(found[0]),
            name=name,
            cron=cron,
            timezone=timezone,
            workflow=workflow,
            input=self._build.seal(input_json),
            catchup=catchup,
            max_catchup=max_catchup,
            source=source,
            next_tick=next_tick,
            channel=self._build.channel,
            payload=SCHEDULES_PAYLOAD,
        )

    def get(self, name: str) -> Statement[Row | None]:
        """One schedule's workflow, input as JSON text, and the clock's time."""
        return self._build("schedule_get", first(dict), name=name)

    def delete(self, name: str) -> Statement[bool]:
        """Remove a schedule; whether it existed."""
        return self._build("schedule_delete", bool, name=name)

    def set_paused(self, name: str, paused: bool) -> Statement[ScheduleInfo | None]:
        """Pause or resume a schedule; None if there is none of that name."""
        return self._build(
            "schedule_set_paused",
            first(rows.schedule),
            name=name,
            paused=paused,
            channel=self._build.channel,
            payload=SCHEDULES_PAYLOAD,
        )

    def due(self, limit: int = 100) -> Statement[tuple[list[str], float | None]]:
        """The names of the schedules due now, and the seconds until the next tick of any."""
        return self._build("schedule_due", _due, limit=limit)

    def lock_due(self, name: str) -> Statement[Row | None]:
        """Lock schedule ``name`` if it is due and no other worker holds it (in a transaction)."""
        return self._build("schedule_lock_due", first(dict), name=name)

    def advance(
        self,
        name: str,
        next_tick: datetime,
        last_tick: datetime | None,
        last_run_id: str | None,
    ) -> Statement[None]:
        """Move a locked schedule's next tick on, recording the last tick started."""
        return self._build(
            "schedule_advance",
            lambda found: None,
            name=name,
            next_tick=next_tick,
            last_tick=last_tick,
            last_run_id=last_run_id,
        )

    def now(self) -> Statement[datetime]:
        """The time every query compares with: the server's clock, or a test's."""
        return self._build("schedule_now", lambda found: found[0]["now"])

    def list(self, name: str | None = None) -> Statement[list[ScheduleInfo]]:
        """Every schedule (or the one named), by name."""
        return self._build(
            "schedule_list", lambda found: [rows.schedule(r) for r in found], name=name
        )
