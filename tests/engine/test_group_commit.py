"""Group commit: many runs' checkpoints in one transaction, each still fenced on its own.

The worker's Committer sends the completed steps of several runs as one
merged statement (and their completions as another): a lost lease or a stale
history in one run must leave the others' writes intact, and an error in one
unit must not fail the others.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import perdure
from perdure.engine.commit import Committer, Unit
from perdure.engine.control import Disconnected
from perdure.store.rows import ClaimedTask, Fence, Fenced
from perdure.store.store import AsyncStore

Conn = psycopg.Connection[tuple[Any, ...]]


async def _claimed(app: perdure.App, count: int) -> tuple[AsyncStore, list[ClaimedTask]]:
    @app.workflow("gc")
    async def gc(ctx: perdure.Context) -> None:
        """Never executed: the test writes the checkpoints itself."""

    for _ in range(count):
        await app.start_async("gc")
    store = AsyncStore(app.url, app.statements)
    await store.open()
    claimed = await store.execute(
        app.statements.tasks.claim(
            worker_id="w1",
            queues=["gc"],
            names=["gc"],
            versions=[1],
            limit=count,
            lease_seconds=30,
        )
    )
    assert len(claimed) == count
    return store, sorted(claimed, key=lambda t: t.fence.task_id)


def _checkpoint(app: perdure.App, fence: Fence, position: int, output: str = "1") -> Any:
    return app.statements.steps.checkpoint(
        fence,
        lease_seconds=30,
        position=position,
        name=f"s{position}",
        kind="step",
        status="completed",
        attempts=1,
        output_json=output,
        error_json=None,
        started_at=datetime.now(UTC),
        event="step_completed",
    )


def test_merged_checkpoints_are_fenced_one_by_one(app: perdure.App, db: Conn) -> None:
    async def main() -> list[list[Any]]:
        store, tasks = await _claimed(app, 3)
        stale = Fence(tasks[1].fence.task_id, "w1", tasks[1].fence.attempt + 1)
        units = [
            [_checkpoint(app, tasks[0].fence, 0)],
            [_checkpoint(app, stale, 0)],
            [_checkpoint(app, tasks[2].fence, 0)],
        ]
        try:
            return await store.execute_batch(units)
        finally:
            await store.close()

    results = asyncio.run(main())
    ours = Fenced(leased=True, written=True, run_status="running")
    assert results == [[ours], [Fenced(leased=False, written=False)], [ours]]
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (2,)
    events = db.execute("SELECT event, count(*) FROM history GROUP BY event").fetchall()
    assert dict(events)["step_completed"] == 2


def test_merged_completions_finish_each_run_or_leave_its_task(app: perdure.App, db: Conn) -> None:
    async def main() -> tuple[list[list[Any]], list[ClaimedTask]]:
        store, tasks = await _claimed(app, 3)
        # The second run's position 0 already holds a final checkpoint: its
        # replay was stale, so it must keep its task and not complete.
        await store.execute(_checkpoint(app, tasks[1].fence, 0))
        units = [
            [
                app.statements.batch.run_complete_step(
                    t.fence, '"done"', _checkpoint(app, t.fence, 0)
                )
            ]
            for t in tasks
        ]
        try:
            return await store.execute_batch(units), tasks
        finally:
            await store.close()

    results, tasks = asyncio.run(main())
    done, stale = Fenced(leased=True), Fenced(leased=True, written=False, changed=False)
    assert results == [[done], [stale], [done]]
    statuses = dict(db.execute("SELECT id::text, status FROM runs").fetchall())
    assert statuses[tasks[0].run_id] == statuses[tasks[2].run_id] == "completed"
    assert statuses[tasks[1].run_id] == "running"
    assert db.execute("SELECT run_id::text FROM tasks").fetchall() == [(tasks[1].run_id,)]
    completed = db.execute("SELECT count(*) FROM history WHERE event = 'run_completed'").fetchone()
    assert completed == (2,)


def test_an_error_in_one_unit_fails_that_unit_only(app: perdure.App, db: Conn) -> None:
    async def main() -> list[Any]:
        store, tasks = await _claimed(app, 3)
        committer = Committer(store)
        committer.start()
        try:

            def unit(task: ClaimedTask, output: str = "1") -> Unit:
                return Unit(task.fence.task_id, [_checkpoint(app, task.fence, 0, output)])

            writes = [
                committer.write(unit(tasks[0])),
                # Not JSON: the server refuses it, and the shared transaction with it.
                committer.write(unit(tasks[1], output="{oops")),
                committer.write(unit(tasks[2])),
            ]
            return await asyncio.gather(*writes, return_exceptions=True)
        finally:
            await committer.stop()
            await store.close()

    first, second, third = asyncio.run(main())
    ours = Fenced(leased=True, written=True, run_status="running")
    assert first == [ours] and third == [ours]
    assert isinstance(second, psycopg.errors.InvalidTextRepresentation)
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (2,)


@pytest.mark.parametrize("runs", [40])
def test_a_worker_commits_many_runs_steps_together(app: perdure.App, db: Conn, runs: int) -> None:
    @app.workflow("three")
    async def three(ctx: perdure.Context, n: int) -> int:
        a = await ctx.step("a", _plus, n, 1)
        b = await ctx.step("b", _plus, a, 1)
        return int(await ctx.step("c", _plus, b, 1))

    handles = [app.start("three", n) for n in range(runs)]
    worker = app.worker(concurrency=16, exit_when_idle=True)
    asyncio.run(worker.run())
    assert [h.result(timeout=10) for h in handles] == [n + 3 for n in range(runs)]
    # Every step checkpointed once with its history, every run completed once.
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (3 * runs,)
    events = dict(db.execute("SELECT event, count(*) FROM history GROUP BY event").fetchall())
    assert events["step_completed"] == 3 * runs and events["run_completed"] == runs
    # Fewer transactions than steps: steps of different runs shared commits.
    assert worker.counts["shared_commits"] < 3 * runs
    # Per run: the checkpoints of a and b, then c's with the completion.
    assert worker.counts["committed_units"] == 3 * runs


async def _plus(a: int, b: int) -> int:
    return a + b


def test_a_committer_not_started_writes_each_unit_in_a_transaction_of_its_own(
    app: perdure.App, db: Conn
) -> None:
    """A lone execution outside a worker (no lanes) still commits its unit, alone."""

    async def main() -> list[Any]:
        store, tasks = await _claimed(app, 1)
        committer = Committer(store)  # never started
        try:
            return await committer.write(
                Unit(tasks[0].fence.task_id, [_checkpoint(app, tasks[0].fence, 0)])
            )
        finally:
            await store.close()

    assert asyncio.run(main()) == [Fenced(leased=True, written=True, run_status="running")]
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (1,)


def test_a_stopping_committer_tells_the_units_still_queued_that_nothing_was_written(
    app: perdure.App, db: Conn
) -> None:
    async def main() -> list[Any]:
        store, tasks = await _claimed(app, 2)
        committer = Committer(store)
        committer.start()
        try:
            # Queued while the lanes are stopped: no lane ever takes them.
            await committer.stop()
            writes = [
                asyncio.ensure_future(
                    committer.write(Unit(t.fence.task_id, [_checkpoint(app, t.fence, 0)]))
                )
                for t in tasks
            ]
            await asyncio.sleep(0)  # both are queued now
            writes[1].cancel()  # its caller gave up: its unit is left alone
            await asyncio.sleep(0)
            await committer.stop()
            return await asyncio.gather(*writes, return_exceptions=True)
        finally:
            await store.close()

    first, second = asyncio.run(main())
    assert isinstance(first, Disconnected) and "stopping" in str(first)
    assert isinstance(second, asyncio.CancelledError)
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (0,)


def test_a_commit_cut_short_by_the_worker_stopping_is_reported_as_unknown(
    app: perdure.App, db: Conn, pg_url: str, schema: str
) -> None:
    """Stopped mid-commit, the committer cannot know whether the transaction
    committed: each unit in it hears Disconnected, as after a lost connection."""

    async def main() -> list[Any]:
        store, tasks = await _claimed(app, 2)
        committer = Committer(store)
        committer.start()
        with psycopg.connect(pg_url) as locker:
            # Hold the task rows: the shared transaction waits for them.
            ids = [t.fence.task_id for t in tasks]
            locker.execute(f"SELECT 1 FROM {schema}.tasks WHERE id = ANY(%s) FOR UPDATE", (ids,))
            writes = [
                asyncio.ensure_future(
                    committer.write(Unit(t.fence.task_id, [_checkpoint(app, t.fence, 0)]))
                )
                for t in tasks
            ]
            deadline = asyncio.get_running_loop().time() + 30
            while not db.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()[0]:  # type: ignore[index]
                assert asyncio.get_running_loop().time() < deadline, "the commit never waited"
                await asyncio.sleep(0.02)
            await committer.stop()
            locker.rollback()
        try:
            return await asyncio.gather(*writes, return_exceptions=True)
        finally:
            await store.close()

    results = asyncio.run(main())
    assert all(isinstance(r, Disconnected) and "during a commit" in str(r) for r in results)
