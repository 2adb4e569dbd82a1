"""Retry policies: how many attempts, and how long to wait before each one."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from perdure.errors import ConfigurationError, PermanentError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, for a step or a workflow body.

    The wait before attempt ``n + 1`` is ``initial_delay * multiplier ** (n - 1)``,
    capped at ``max_delay``, then spread by up to ``jitter`` (a fraction) in
    either direction so that runs failing together do not retry together.
    Exceptions listed in ``non_retryable`` (and :class:`~perdure.PermanentError`)
    fail at once.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(
                f"max_attempts must be an integer >= 1, not {self.max_attempts!r}"
            )
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ConfigurationError("retry delays cannot be negative")
        if self.multiplier < 1:
            raise ConfigurationError(f"multiplier must be >= 1, not {self.multiplier!r}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be between 0 and 1, not {self.jitter!r}")

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
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
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


#: Steps: three attempts, one then two seconds apart.
DEFAULT_STEP_RETRY = RetryPolicy()
#: Workflow bodies (code outside steps): three attempts.
DEFAULT_WORKFLOW_RETRY = RetryPolicy()
