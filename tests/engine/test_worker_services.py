"""The worker built from parts: its periodic jobs' options, the runner they run under,
the service set of each mode, and the bookkeeping of the executions it holds."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

import perdure
from perdure.engine import modes, outcome
from perdure.engine.executions import Executions
from perdure.engine.job_options import (
    ReaperOptions,
    RetentionOptions,
    StatusOptions,
    TickerOptions,
)
from perdure.engine.observer import Observers
from perdure.engine.options import WorkerOptions
from perdure.engine.services import Runner
from perdure.store.rows import ClaimedTask
from perdure.store.store import AsyncStore


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: ReaperOptions(reap_seconds=0), "reap_seconds"),
        (lambda: ReaperOptions(lease_seconds=-1), "lease_seconds"),
        (lambda: TickerOptions(poll_seconds=0), "poll_seconds"),
        (lambda: RetentionOptions(prune_after=-5), "prune_after"),
        (lambda: RetentionOptions(prune_archive="yes"), "prune_archive"),  # type: ignore[arg-type]
        (lambda: RetentionOptions(prune_batch=0), "prune_batch"),
        (lambda: RetentionOptions(maintenance_seconds=float("nan")), "maintenance_seconds"),
        (lambda: StatusOptions(status_seconds=0), "status_seconds"),
    ],
)
def test_a_jobs_bad_option_is_refused_by_name(make: Any, option: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match=option):
        make()


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"reap_seconds": -1}, "reap_seconds"),
        ({"poll_seconds": 0}, "poll_seconds"),
        ({"prune_batch": 0}, "prune_batch"),
        ({"maintenance_seconds": 0}, "maintenance_seconds"),
    ],
)
def test_the_worker_options_refuse_a_jobs_bad_option(options: dict[str, Any], option: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match=option):
        WorkerOptions(**options)


def test_the_jobs_options_are_made_from_the_worker_options() -> None:
    from datetime import timedelta

    options = WorkerOptions(
        lease_seconds=8.0,
        poll_seconds=0.5,
        prune_after=86400.0,
        prune_archive=True,
        prune_batch=10,
        maintenance_seconds=60.0,
    )
    assert (options.reaper.interval, options.reaper.stale_seconds) == (4.0, 16.0)
    assert WorkerOptions(reap_seconds=2.5).reaper.interval == 2.5
    assert options.ticker.poll_seconds == 0.5
    assert options.retention == RetentionOptions(86400.0, True, 10, 60.0)
    assert options.prune_after == 86400.0
    assert RetentionOptions(timedelta(hours=1)).cutoff_seconds == 3600.0


def _jobs(**options: Any) -> list[tuple[str, bool]]:
    mode = modes.mode(WorkerOptions(**options), ["default"], Observers([], {}))
    return [(job.name, job.on_duty) for job in mode.jobs(cast(AsyncStore, None))]


def test_a_serving_worker_runs_every_job_and_the_duty_holders() -> None:
    assert _jobs() == [
        ("status", False),
        ("reaper", True),
        ("ticker", True),
        ("retention", False),
    ]
    mode = modes.mode(WorkerOptions(), [], Observers([], {}))
    assert type(mode) is modes.Serving
    assert mode.counts_stuck_threads
    assert not mode.finished(idle=True, due=None)


def test_inline_mode_is_its_own_service_set() -> None:
    assert _jobs(exit_when_idle=True) == [("status", False), ("reaper", True)]
    mode = modes.mode(WorkerOptions(exit_when_idle=True), [], Observers([], {}))
    assert type(mode) is modes.Inline
    assert not mode.counts_stuck_threads
    assert mode.finished(idle=True, due=None)
    assert mode.finished(idle=True, due=0.5)
    assert not mode.finished(idle=True, due=0.0)  # due now: claim it first
    assert not mode.finished(idle=False, due=None)


class _Failing:
    """A job that fails its first ``failures`` runs, then runs until cancelled."""

    name = "failing"
    on_duty = False

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs = 0
        self.running = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise RuntimeError(f"failure {self.runs}")
        self.running.set()
        await asyncio.Event().wait()


async def _until(check: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_the_runner_restarts_a_failed_job_with_a_growing_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = _Failing(3)

    async def scenario() -> None:
        runner = Runner(job, restart_seconds=0.1, restart_max_seconds=0.2)
        runner.start()
        await asyncio.wait_for(job.running.wait(), 5)
        assert (job.runs, runner.restarts) == (4, 3)
        await runner.stop()
        await runner.stop()  # twice is fine

    with caplog.at_level(logging.ERROR, logger="perdure.services"):
        asyncio.run(scenario())
    delays = [r.getMessage() for r in caplog.records]
    assert delays == [
        "failing job failed (RuntimeError('failure 1')); restarting in 0.1 s",
        "failing job failed (RuntimeError('failure 2')); restarting in 0.2 s",
        "failing job failed (RuntimeError('failure 3')); restarting in 0.2 s",
    ]
    assert [r.exc_info is not None for r in caplog.records] == [True, True, True]


class _OnDuty:
    name = "duty"
    on_duty = True

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def run(self) -> None:
        self.started += 1
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled += 1


def test_the_runner_runs_a_duty_only_while_the_worker_holds_it() -> None:
    job = _OnDuty()
    duty = threading.Event()

    async def scenario() -> None:
        runner = Runner(job, duty, check_seconds=0.01)
        runner.start()
        await asyncio.sleep(0.05)
        assert job.started == 0  # not the duty holder: never started
        duty.set()
        await _until(lambda: job.started == 1)
        duty.clear()
        await _until(lambda: job.cancelled == 1)
        duty.set()
        await _until(lambda: job.started == 2)
        await runner.stop()
        assert job.cancelled == 2

    asyncio.run(scenario())
    with pytest.raises(ValueError, match="needs the duty flag"):
        Runner(_OnDuty())


def _claimed(task_id: int, attempt: int) -> ClaimedTask:
    return cast(
        ClaimedTask, SimpleNamespace(fence=SimpleNamespace(task_id=task_id, attempt=attempt))
    )


def test_an_ending_execution_removes_only_its_own_entry() -> None:
    """A task handed back and claimed again before its first execution has ended:
    the first one's end must leave the second one held (the worker is not idle)."""

    async def scenario() -> None:
        running = Executions()
        job = asyncio.ensure_future(asyncio.sleep(0, "done"))
        first, second = _claimed(7, 1), _claimed(7, 2)
        running.add(first, job)
        again = running.add(second, job)  # claimed again: the entry is the new one's
        assert not running.end(first)
        assert running == {7: again}
        assert running.attempts() == {7: 2}
        assert running.end(second)
        assert running == {}
        await job

    asyncio.run(scenario())


def test_an_execution_ending_after_its_task_was_claimed_again_leaves_the_worker_busy(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first execution of a parked run ends only once its task was claimed again,
    and the second execution goes on only once the first has ended (as when the loop
    resumes the first late): the inline worker must still see the second execution
    and wait for it, not stop mid-run."""

    @app.workflow("naps")
    async def naps(ctx: perdure.Context, n: int) -> int:
        for _ in range(n):
            await ctx.sleep(0.001)
        return n

    handle = app.start("naps", 2)
    real = outcome.execute
    calls: list[asyncio.Task[Any] | None] = []

    async def main() -> None:
        worker = await app.worker_async(exit_when_idle=True, poll_seconds=0.02)

        async def ends_late(task: ClaimedTask, spec: Any, env: Any) -> str:
            calls.append(asyncio.current_task())
            if len(calls) == 2:
                first = calls[0]
                assert first is not None
                await _until(first.done, 20)  # the first execution has ended
            result = await real(task, spec, env)
            if len(calls) == 1:
                # Hold this execution's end until its task is claimed again.
                await _until(lambda: worker.running[task.fence.task_id].task is not task, 20)
            return result

        monkeypatch.setattr(outcome, "execute", ends_late)
        await worker.run()

    asyncio.run(main())
    assert len(calls) == 3
    assert handle.status() == "completed"
    assert handle.result(timeout=0) == 2
