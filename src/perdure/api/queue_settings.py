"""A queue's settings as one caller states them: limits, rates, and what is left unset."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from perdure.engine.arguments import INT32_MAX, validate_name
from perdure.errors import ConfigurationError


class Unset(enum.Enum):
    """The type of ``UNSET``."""

    UNSET = "unset"


#: A setting the caller does not state: it keeps the value it has.
UNSET = Unset.UNSET

#: A queue limit: a number, None for no limit, or UNSET to leave it as it is.
Limit = int | None | Unset

#: A rate limit: (at most this many claims, per this many seconds), None for
#: no limit, or UNSET to leave it as it is.
Rate = tuple[int, float | timedelta] | None | Unset

#: The settings that are whole-number limits.
SETTINGS = ("concurrency", "worker_concurrency", "partition_concurrency")

#: The longest rate period: a year.
MAX_RATE_PERIOD = 365 * 86400.0


def validate_limit(queue: str, setting: str, value: object) -> int | None:
    """Return ``value`` if it is a valid limit (an integer >= 1, or None), else raise."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= INT32_MAX:
        raise ConfigurationError(
            f"queue {queue!r}: {setting} must be an integer from 1 to {INT32_MAX}, or None "
            f"for no limit, not {value!r}"
        )
    return value


def validate_rate(queue: str, value: object) -> tuple[int, float] | None:
    """Return ``value`` as (count, seconds) if it is a valid rate limit (or None), else raise."""
    if value is None:
        return None
    period: object = None
    if isinstance(value, tuple) and len(value) == 2:
        count, period = value
        if isinstance(period, timedelta):
            period = period.total_seconds()
        if (
            isinstance(count, int)
            and not isinstance(count, bool)
            and 1 <= count <= INT32_MAX
            and isinstance(period, int | float)
            and not isinstance(period, bool)
            and math.isfinite(period)
            and 0 < period <= MAX_RATE_PERIOD
        ):
            return count, float(period)
    raise ConfigurationError(
        f"queue {queue!r}: rate_limit must be (count, seconds): a count from 1 to {INT32_MAX} "
        f"per a period of seconds (or a timedelta) above 0 and at most a year, or None for "
        f"no limit, not {value!r}"
    )


@dataclass(frozen=True)
class QueueDef:
    """A queue's settings as one caller states them; UNSET ones are left as they are.

    ``concurrency`` caps the tasks of the queue running at once across all
    workers; ``worker_concurrency`` caps them per worker;
    ``partition_concurrency`` caps them per partition key (``start(...,
    partition_key=)``). ``rate_limit=(N, seconds)`` lets at most N tasks be
    claimed per that many seconds, across all workers, per partition key
    when ``rate_per_key``. None means no limit.
    """

    name: str
    concurrency: Limit = UNSET
    worker_concurrency: Limit = UNSET
    partition_concurrency: Limit = UNSET
    rate_limit: Rate = UNSET
    rate_per_key: bool | Unset = UNSET

    def __post_init__(self) -> None:
        validate_name("queue", self.name)
        for setting in SETTINGS:
            value = getattr(self, setting)
            if value is not UNSET:
                validate_limit(self.name, setting, value)
        if not isinstance(self.rate_limit, Unset):
            object.__setattr__(self, "rate_limit", validate_rate(self.name, self.rate_limit))
        if not isinstance(self.rate_per_key, Unset | bool):
            raise ConfigurationError(
                f"queue {self.name!r}: rate_per_key must be True or False, not "
                f"{self.rate_per_key!r}"
            )

    def limits(self) -> dict[str, Any]:
        """The stated settings, by name."""
        stated: dict[str, Any] = {}
        for setting in (*SETTINGS, "rate_limit", "rate_per_key"):
            value = getattr(self, setting)
            if not isinstance(value, Unset):
                stated[setting] = value
        return stated

    def columns(self) -> dict[str, Any]:
        """The stated settings as the ``queues`` table's columns (a rate is two)."""
        stated = self.limits()
        if "rate_limit" in stated:
            rate = stated.pop("rate_limit")
            stated["rate_limit"], stated["rate_period"] = rate if rate else (None, None)
        return stated
