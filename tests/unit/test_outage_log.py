"""Warnings of an unreachable database: one per interval and kind, with a count."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest

from perdure.store import outage_log

REFUSED = psycopg.OperationalError(
    'connection failed: connection to server at "127.0.0.1", port 6432 failed: '
    "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?"
)


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def kept() -> Iterator[Kept]:
    outage_log.install()
    handler = Kept()
    logger = logging.getLogger("perdure.worker")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_burst_of_connection_warnings_logs_one_per_interval_with_a_count(
    kept: Kept, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging.getLogger("perdure.worker")
    for _ in range(100):
        log.warning("claim failed (%s); retrying in %.2f s", REFUSED, 0.25)
    log.warning("a warning of another kind")
    assert kept.lines == [
        "database unreachable: connection refused (claim failed)",
        "a warning of another kind",
    ]
    # The next interval's first one says how many were held back.
    monkeypatch.setattr(outage_log, "INTERVAL_SECONDS", 0.0)
    log.warning("claim failed (%s); retrying in %.2f s", REFUSED, 0.25)
    assert kept.lines[-1] == (
        "database unreachable: connection refused (claim failed; 99 more in the last 0 s)"
    )


def test_each_kind_and_each_run_is_told(kept: Kept) -> None:
    log = logging.getLogger("perdure.worker")
    log.warning("claim failed (%s)", REFUSED)
    log.warning("status query failed: %s", REFUSED)
    for run in ("r1", "r2"):
        log.warning(
            "run %s: lost the database mid-execution (%s)", run, REFUSED, extra={"run_id": run}
        )
    assert kept.lines[:2] == [
        "database unreachable: connection refused (claim failed)",
        "database unreachable: connection refused (status query failed)",
    ]
    assert [line.split(":")[0] for line in kept.lines[2:]] == ["run r1", "run r2"]
