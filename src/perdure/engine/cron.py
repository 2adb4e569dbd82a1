"""Cron expressions on the wall clock of a time zone: parse them, find ticks, plan catch-up.

Pure functions of their arguments (no clock, no database), so the tests can
walk a schedule across a daylight-saving change without waiting for one.

Every tick is returned as an aware datetime in UTC. A schedule follows the
wall clock of its time zone: a wall-clock time that does not exist (the hour
skipped when clocks go forward) fires at the first instant after the gap, and
one that occurs twice (the hour repeated when clocks go back) fires once, at
its first occurrence.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from perdure.errors import InvalidSchedule

#: The time zone of a schedule that names none.
DEFAULT_TIMEZONE = "UTC"
#: What a schedule does with ticks missed while no worker ran: see ``plan``.
CATCHUP_POLICIES = ("latest", "all", "skip")
DEFAULT_CATCHUP = "latest"
#: At most this many ticks of one schedule are started at once, by default.
DEFAULT_MAX_CATCHUP = 100
#: A tick is "missed" when no worker started it within this many seconds.
MISFIRE_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Cron:
    """A validated cron expression and the time zone whose wall clock it reads."""

    expression: str
    timezone: str
    zone: ZoneInfo = field(repr=False, compare=False)


def zone(timezone: object, schedule: str | None = None) -> ZoneInfo:
    """The ZoneInfo of an IANA name (``"Europe/Paris"``) or a ZoneInfo; else InvalidSchedule."""
    if isinstance(timezone, ZoneInfo):
        if not timezone.key:  # ZoneInfo.from_file: no name to record
            raise InvalidSchedule(schedule, "timezone", timezone, "give a ZoneInfo with a key")
        return timezone
    if not isinstance(timezone, str) or not timezone or "\x00" in timezone:
        raise InvalidSchedule(schedule, "timezone", timezone, "give an IANA name such as 'UTC'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            schedule, "timezone", timezone, "unknown time zone (IANA names: 'Europe/Paris')"
        ) from None


def parse(
    expression: object, timezone: object = DEFAULT_TIMEZONE, schedule: str | None = None
) -> Cron:
    """Check a cron expression and a time zone; InvalidSchedule names what is wrong.

    Five fields (minute hour day month weekday), six with seconds last
    (croniter's form: ``"* * * * * */2"`` is every two seconds), or an alias
    such as ``@hourly``. An expression that never fires (``0 0 31 2 *``) is refused.
    """
    tz = zone(timezone, schedule)
    if not isinstance(expression, str):
        raise InvalidSchedule(schedule, "cron", expression, "a cron expression is a string")
    text = " ".join(expression.split())
    fields = text.split(" ")
    if not text.startswith("@") and len(fields) not in (5, 6):
        raise InvalidSchedule(
            schedule,
            "cron",
            expression,
            f"{len(fields)} field(s); use 5 (minute hour day month weekday) or 6 (seconds last)",
        )
    from croniter import croniter

    if not croniter.is_valid(text):
        raise InvalidSchedule(schedule, "cron", expression, "not a valid cron expression")
    cron = Cron(text, tz.key, tz)
    try:
        next_tick(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except Exception:  # croniter's "no such date in 50 years" error
        raise InvalidSchedule(schedule, "cron", expression, "it never fires") from None
    return cron


def _first_occurrence(cron: Cron, tick: datetime) -> bool:
    """False when ``tick`` is the second instant of a wall-clock time that occurs twice."""
    utc = tick.astimezone(UTC)
    # fold=0 is the first instant of a wall-clock time that occurs twice.
    first = utc.astimezone(cron.zone).replace(fold=0)
    return first.astimezone(UTC) == utc


def _walk(cron: Cron, start: datetime, forward: bool) -> Iterator[datetime]:
    # Imported on first use: croniter and dateutil cost a tenth of a second,
    # which a command that never reads a schedule need not pay.
    from croniter import croniter

    it = croniter(cron.expression, start.astimezone(cron.zone))
    step = it.get_next if forward else it.get_prev
    while True:
        tick = step(datetime)
        if _first_occurrence(cron, tick):
            yield tick.astimezone(UTC)


def next_tick(cron: Cron, after: datetime) -> datetime:
    """The first tick strictly after ``after`` (an aware datetime), in UTC."""
    return next(_walk(cron, _aware(after), forward=True))


def ticks(cron: Cron, after: datetime, count: int) -> list[datetime]:
    """The ``count`` ticks following ``after``, in UTC: what ``schedules list`` shows to come."""
    return list(itertools.islice(_walk(cron, _aware(after), forward=True), count))


def _backwards(cron: Cron, until: datetime) -> Iterator[datetime]:
    """Ticks at or before ``until``, newest first."""
    # croniter works in whole seconds and get_prev is strict: start from the
    # next whole second and drop what lies after `until`.
    start = until.replace(microsecond=0) + timedelta(seconds=1)
    return itertools.dropwhile(lambda tick: tick > until, _walk(cron, start, forward=False))


@dataclass(frozen=True)
class Plan:
    """What a ticker does with a due schedule: the ticks to start, and the next one."""

    #: Ticks to start a run for, oldest first.
    fire: list[datetime]
    #: The first tick after now: the schedule's new next_tick.
    next_tick: datetime
    #: The oldest due tick left unstarted (missed or over the limit), if any.
    skipped_from: datetime | None = None


def plan(
    cron: Cron,
    due: datetime,
    now: datetime,
    catchup: str = DEFAULT_CATCHUP,
    max_catchup: int = DEFAULT_MAX_CATCHUP,
    grace: float = MISFIRE_GRACE_SECONDS,
) -> Plan:
    """Which of the ticks from ``due`` (the schedule's next_tick) to ``now`` to start.

    A tick no older than ``grace`` seconds is on time and always started. An
    older one was missed (no worker ran, or the schedule was paused); the
    policy decides: ``"latest"`` starts the most recent due tick even when it
    was missed, ``"all"`` starts every missed tick too, and ``"skip"`` starts
    none of them. At most ``max_catchup`` ticks are started, the most recent
    ones. The ticks are read newest first, so a long outage costs at most
    ``max_catchup`` steps, not one per tick missed.
    """
    due, now = _aware(due), _aware(now)
    fire: list[datetime] = []
    complete = True
    for tick in _backwards(cron, now):
        if tick < due:
            break
        on_time = (now - tick).total_seconds() <= grace
        if len(fire) >= max_catchup or not (
            on_time or catchup == "all" or (catchup == "latest" and not fire)
        ):
            complete = False
            break
        fire.append(tick)
    fire.reverse()
    skipped = None if complete else due
    return Plan(fire, next_tick(cron, now), skipped)


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("cron times must be timezone-aware")
    return when.astimezone(UTC)
