"""Fixtures of the deployment tests: a primary with a synchronous hot standby, a Patroni cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from deploy import patroni_cluster
from deploy.patroni_cluster import PatroniCluster
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


@pytest.fixture
def ha_cluster() -> Iterator[PatroniCluster]:
    """etcd and Patroni managing three PostgreSQL 15 nodes (root only).

    Without root it is skipped, as the pair is; a missing package fails the
    test and names it (.ci/run installs them).
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: etcd, Patroni and PostgreSQL run as the perdure account")
    reason = patroni_cluster.missing_reason()
    if reason is not None:
        pytest.fail(reason)
    started = PatroniCluster()
    try:
        yield started
    finally:
        started.close()
