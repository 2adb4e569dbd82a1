"""Retry policy math: backoff, cap, jitter bounds, and which errors retry."""

from __future__ import annotations

import random

import pytest

from perdure.engine.retry import RetryPolicy
from perdure.errors import ConfigurationError, PermanentError


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1, multiplier=3, max_delay=20, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 3, 9, 20, 20]


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(initial_delay=10, multiplier=1, jitter=0.2)
    rng = random.Random(7)
    delays = [policy.delay(1, rng) for _ in range(500)]
    assert min(delays) >= 8 and max(delays) <= 12 and len(set(delays)) > 100


def test_permanent_and_listed_errors_do_not_retry() -> None:
    policy = RetryPolicy(max_attempts=3, non_retryable=(KeyError,))
    assert policy.should_retry(RuntimeError(), 1)
    assert not policy.should_retry(RuntimeError(), 3)
    assert not policy.should_retry(PermanentError("no"), 1)
    assert not policy.should_retry(KeyError("k"), 1)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_delay": -1}, {"multiplier": 0.5}, {"jitter": 2}],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
