"""Fixtures of the deployment tests: a primary with a synchronous hot standby."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.replicated import ReplicatedPair, missing_reason


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    """A primary and a synchronous hot standby of PostgreSQL 15 (root only)."""
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    started = ReplicatedPair()
    try:
        yield started
    finally:
        started.close()
