"""Cron ticks on a time zone's wall clock, and the catch-up plan: pure functions, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perdure.engine import cron
from perdure.errors import ConfigurationError, InvalidSchedule

PARIS = "Europe/Paris"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_nine_oclock_in_paris_follows_the_wall_clock_across_both_dst_changes() -> None:
    nine = cron.parse("0 9 * * *", PARIS)
    # Clocks go forward on 31 March 2024: 09:00 is 08:00 UTC before, 07:00 after.
    assert cron.ticks(nine, utc(2024, 3, 29, 12), 3) == [
        utc(2024, 3, 30, 8),
        utc(2024, 3, 31, 7),
        utc(2024, 4, 1, 7),
    ]
    # And back on 27 October: 07:00 UTC before, 08:00 after.
    assert cron.ticks(nine, utc(2024, 10, 25, 12), 3) == [
        utc(2024, 10, 26, 7),
        utc(2024, 10, 27, 8),
        utc(2024, 10, 28, 8),
    ]
    assert cron.next_tick(nine, utc(2024, 3, 30, 8)) == utc(2024, 3, 31, 7), "strictly after"


def test_the_default_time_zone_is_utc() -> None:
    assert cron.parse("0 9 * * *").timezone == "UTC" == cron.DEFAULT_TIMEZONE
    assert cron.next_tick(cron.parse("0 9 * * *"), utc(2024, 3, 30, 12)) == utc(2024, 3, 31, 9)


def test_a_wall_clock_time_that_occurs_twice_fires_once_and_a_skipped_one_fires_after_the_gap() -> (
    None
):
    half_past_two = cron.parse("30 2 * * *", PARIS)
    # 02:30 happens twice on 27 October 2024 (00:30 and 01:30 UTC): once is enough.
    assert cron.ticks(half_past_two, utc(2024, 10, 26, 12), 2) == [
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 28, 1, 30),
    ]
    # 02:30 does not exist on 31 March 2024: the tick is 03:00 local, 01:00 UTC.
    assert cron.ticks(half_past_two, utc(2024, 3, 30, 12), 2) == [
        utc(2024, 3, 31, 1),
        utc(2024, 4, 1, 0, 30),
    ]
    # Walking backwards (catch-up) sees the same ticks as walking forwards.
    plan = cron.plan(half_past_two, utc(2024, 10, 26, 0), utc(2024, 10, 28, 2), "all")
    assert plan.fire == [
        utc(2024, 10, 26, 0, 30),
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 28, 1, 30),
    ]


def test_six_fields_put_seconds_last() -> None:
    every_two = cron.parse("* * * * * */2")
    assert cron.ticks(every_two, utc(2024, 1, 1, 0, 0, 5), 3) == [
        utc(2024, 1, 1, 0, 0, 6),
        utc(2024, 1, 1, 0, 0, 8),
        utc(2024, 1, 1, 0, 0, 10),
    ]
    assert cron.parse("@hourly").expression == "@hourly"


@pytest.mark.parametrize(
    ("expression", "timezone", "field", "message"),
    [
        ("61 * * * *", "UTC", "cron", "not a valid cron"),
        ("* * * *", "UTC", "cron", "4 field"),
        ("* * * * * * *", "UTC", "cron", "7 field"),
        ("0 0 31 2 *", "UTC", "cron", "never fires"),
        ("", "UTC", "cron", "field"),
        (5, "UTC", "cron", "a string"),
        ("* * * * *", "Mars/Olympus", "timezone", "unknown time zone"),
        ("* * * * *", "", "timezone", "IANA"),
        ("* * * * *", "../etc/passwd", "timezone", "unknown time zone"),
        ("* * * * *", 2, "timezone", "IANA"),
    ],
)
def test_bad_expressions_and_time_zones_are_refused_with_the_field_named(
    expression: object, timezone: object, field: str, message: str
) -> None:
    with pytest.raises(InvalidSchedule, match=message) as caught:
        cron.parse(expression, timezone, "nightly")
    assert caught.value.field == field and caught.value.schedule == "nightly"
    assert isinstance(caught.value, ConfigurationError)


EVERY_MINUTE = cron.parse("* * * * *")
NOW = utc(2024, 5, 1, 12, 0, 30)


def test_on_time_ticks_are_started_whatever_the_policy() -> None:
    # A worker a little late (within the grace) starts every tick it finds.
    for policy in cron.CATCHUP_POLICIES:
        plan = cron.plan(EVERY_MINUTE, utc(2024, 5, 1, 11, 59), NOW, policy, grace=120)
        assert plan.fire == [utc(2024, 5, 1, 11, 59), utc(2024, 5, 1, 12)]
        assert plan.next_tick == utc(2024, 5, 1, 12, 1) and plan.skipped_from is None


def test_latest_starts_only_the_most_recent_missed_tick() -> None:
    plan = cron.plan(EVERY_MINUTE, utc(2024, 5, 1, 9), NOW, "latest", grace=10)
    assert plan.fire == [utc(2024, 5, 1, 12)]
    assert plan.skipped_from == utc(2024, 5, 1, 9)
    assert plan.next_tick == utc(2024, 5, 1, 12, 1)


def test_all_starts_every_missed_tick_up_to_the_limit_the_most_recent() -> None:
    plan = cron.plan(EVERY_MINUTE, utc(2024, 5, 1, 11, 55), NOW, "all", grace=10)
    assert plan.fire == [utc(2024, 5, 1, 11, 55) + timedelta(minutes=m) for m in range(6)]
    assert plan.skipped_from is None
    bounded = cron.plan(EVERY_MINUTE, utc(2024, 4, 1), NOW, "all", max_catchup=3, grace=10)
    assert bounded.fire == [utc(2024, 5, 1, 11, 58), utc(2024, 5, 1, 11, 59), utc(2024, 5, 1, 12)]
    assert bounded.skipped_from == utc(2024, 4, 1)


def test_skip_starts_no_missed_tick() -> None:
    plan = cron.plan(EVERY_MINUTE, utc(2024, 5, 1, 9), NOW, "skip", grace=10)
    assert plan.fire == [] and plan.skipped_from == utc(2024, 5, 1, 9)
    assert plan.next_tick == utc(2024, 5, 1, 12, 1)


def test_a_long_outage_costs_at_most_max_catchup_steps() -> None:
    every_second = cron.parse("* * * * * *")
    # A year of missed seconds: only the kept ticks are walked.
    plan = cron.plan(every_second, utc(2023, 5, 1), NOW, "all", max_catchup=5)
    assert len(plan.fire) == 5 and plan.fire[-1] == NOW


@settings(max_examples=60, deadline=None)
@given(
    due_minutes=st.integers(min_value=0, max_value=600),
    policy=st.sampled_from(cron.CATCHUP_POLICIES),
    limit=st.integers(min_value=1, max_value=20),
    grace=st.sampled_from([0.0, 30.0, 60.0, 300.0]),
)
def test_a_plan_starts_due_ticks_only_in_order_and_moves_past_now(
    due_minutes: int, policy: str, limit: int, grace: float
) -> None:
    due = utc(2024, 5, 1, 12) - timedelta(minutes=due_minutes)
    plan = cron.plan(EVERY_MINUTE, due, NOW, policy, limit, grace)
    assert plan.fire == sorted(set(plan.fire))
    assert all(due <= tick <= NOW for tick in plan.fire)
    assert len(plan.fire) <= limit and plan.next_tick > NOW
    on_time = [
        t
        for t in (utc(2024, 5, 1, 12) - timedelta(minutes=m) for m in range(due_minutes + 1))
        if (NOW - t).total_seconds() <= grace
    ]
    if len(on_time) <= limit:
        assert set(on_time) <= set(plan.fire), "an on-time tick was dropped"
    if policy != "skip":
        assert plan.fire, "latest and all start at least the most recent tick"
    if plan.skipped_from is None:
        assert len(plan.fire) == due_minutes + 1
