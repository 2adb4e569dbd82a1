"""PgBouncer stops under load and comes back: nothing lapses, and the log stays readable.

A worker runs its statements through a transaction-mode PgBouncer, with runs
in flight. The pooler is stopped at once (SIGTERM), then started again on the
same port. Every run must complete well within its lease: a step whose
checkpoint lost its connection is handed back, a claim whose answer was lost
is given back when the connection returns, and no history row records a lapse
(``lease_expired``). The worker's warnings of the unreachable database come
one per interval with a count of those held back, not one per attempt.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator

import pytest

import perdure
from deploy.pooler import Pooler, missing_reason
from helpers import BackgroundWorker, wait_until
from perdure.store import outage_log

RUNS = 40
STEPS = 4
#: One rate-limited warning per this many seconds in this test (5 s by default).
INTERVAL = 0.5
#: Longer than the test: a lapse would show as a run that does not finish.
LEASE = 60


@pytest.fixture
def pooler(pg_url: str) -> Iterator[Pooler]:
    """A transaction-mode PgBouncer before the suite's server."""
    reason = missing_reason()
    if reason is not None:
        pytest.fail(reason)
    running = Pooler.start(pg_url, 4)
    try:
        yield running
    finally:
        running.close()


@pytest.mark.timeout(120)
def test_a_pooler_restart_under_load_loses_nothing_and_records_no_lapse(
    pg_url: str,
    schema: str,
    pooler: Pooler,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outage_log, "INTERVAL_SECONDS", INTERVAL)
    caplog.set_level(logging.INFO, logger="perdure")
    app = perdure.App(pooler.url, schema=schema, direct_url=pg_url, pool_size=2)

    def work(n: int) -> int:
        time.sleep(0.02)  # a step's own work, not a synchronisation
        return n

    @app.workflow("load")
    async def load(ctx: perdure.Context) -> int:
        total = 0
        for i in range(STEPS):
            total += await ctx.step(f"s{i}", work, i)
        return total

    try:
        app.ensure_schema()
        handles = [app.start("load") for _ in range(RUNS)]
        with BackgroundWorker(
            app, concurrency=8, poll_seconds=0.05, lease_seconds=LEASE, worker_id="pooled"
        ) as worker:

            def completed() -> int:
                finished = worker.recorder.args("run_finished")
                return sum(1 for _, _, status, _ in finished if status == "completed")

            wait_until(lambda: completed() >= 4, what="runs to complete")
            assert completed() < RUNS, "the load ended before the outage"
            began = len(caplog.records)
            outage = time.monotonic()
            pooler.stop()
            # Down until the worker has logged a warning with a count of those
            # it held back (a second interval's warning).
            wait_until(
                lambda: any("more in the last" in r.getMessage() for r in caplog.records[began:]),
                what="a rate-limited warning with a count",
            )
            pooler.restart()
            down = time.monotonic() - outage
            back = time.monotonic()
            for handle in handles:
                assert handle.result(timeout=30) == sum(range(STEPS))
            done = time.monotonic()
        during = caplog.records[began:]
        unreachable = [r for r in during if r.getMessage().startswith("database unreachable")]
        print(f"outage {down:.2f} s: {len(unreachable)} warnings; done {done - back:.2f} s after")
        print("\n".join(r.getMessage() for r in unreachable))
        # One per interval (and the first) for each thing that failed, not one
        # per attempt.
        kinds = Counter(r.getMessage().split(" (", 1)[1].split(";")[0] for r in unreachable)
        assert kinds and max(kinds.values()) <= down / INTERVAL + 2, kinds
        assert len(unreachable) <= len(kinds) * (down / INTERVAL + 2)
        # No raw connection warning got past the filter.
        raw = [
            r.getMessage()
            for r in during
            if r.levelno >= logging.WARNING
            and ("Connection refused" in r.getMessage() or r.name == "psycopg.pool")
            and not r.getMessage().startswith("database unreachable")
        ]
        assert not raw, raw[:5]
        # Nothing lapsed: every run went on within its lease, none took a lapse.
        for handle in handles:
            events = [e.event for e in app.history(handle.id)]
            assert "lease_expired" not in events, (handle.id, events)
    finally:
        app.close()
