"""Retry policies: how many attempts, and how long to wait before each one."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from perdure.engine import arguments
from perdure.errors import ConfigurationError, PermanentError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, for a step or a workflow body.

    The wait before attempt ``n + 1`` is ``initial_delay * multiplier ** (n - 1)``,
    capped at ``max_delay``, then spread by up to ``jitter`` (a fraction) in
    either direction so that runs failing together do not retry together.
    Exceptions listed in ``non_retryable`` (and [`PermanentError`][perdure.errors.PermanentError])
    fail at once.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        arguments.integer("max_attempts", self.max_attempts, minimum=1)
        # Delays may be given as timedeltas; they are kept as seconds.
        for setting in ("initial_delay", "max_delay"):
            object.__setattr__(self, setting, arguments.seconds(setting, getattr(self, setting)))
        multiplier = self.multiplier
        if not _real(multiplier) or not 1 <= multiplier <= 1000:
            raise ConfigurationError(
                f"multiplier must be a number from 1 to 1000, not {multiplier!r}"
            )
        if not _real(self.jitter) or not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be a number from 0 to 1, not {self.jitter!r}")
        # One exception type alone is accepted for a tuple of one.
        kinds = self.non_retryable
        if isinstance(kinds, type):
            kinds = (kinds,)
        if not isinstance(kinds, tuple | list | set | frozenset) or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise ConfigurationError(
                f"non_retryable must be a tuple of exception types, not {kinds!r}"
            )
        object.__setattr__(self, "non_retryable", tuple(kinds))

    def describe(self) -> dict[str, Any]:
        """The policy as plain data (for the workflow registry)."""
        return {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "multiplier": self.multiplier,
            "max_delay": self.max_delay,
            "non_retryable": [t.__name__ for t in self.non_retryable],
        }

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            growth = float(self.multiplier) ** max(0, attempt - 1)
        except OverflowError:  # a large attempt number: the cap applies anyway
            growth = math.inf
        base = min(self.max_delay, self.initial_delay * growth) if self.initial_delay else 0.0
        if self.jitter == 0 or base == 0:
            return base
        spread = base * self.jitter
        return max(0.0, base + (rng or random).uniform(-spread, spread))

    def is_retryable(self, exc: BaseException) -> bool:
        """False for PermanentError and the policy's ``non_retryable`` types."""
        return not isinstance(exc, (PermanentError, *self.non_retryable))

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """True if failed attempt number ``attempt`` may be followed by another."""
        return self.is_retryable(exc) and attempt < self.max_attempts


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_policy(what: str, value: object) -> RetryPolicy | None:
    """``value`` if it is None or a RetryPolicy, else ConfigurationError naming ``what``."""
    if value is not None and not isinstance(value, RetryPolicy):
        raise ConfigurationError(f"{what} must be a perdure.RetryPolicy, not {value!r}")
    return value


#: Steps: three attempts, one then two seconds apart.
DEFAULT_STEP_RETRY = RetryPolicy()
#: Workflow bodies (code outside steps): three attempts.
DEFAULT_WORKFLOW_RETRY = RetryPolicy()
