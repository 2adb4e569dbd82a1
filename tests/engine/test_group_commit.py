"""Group commit: many runs' checkpoints in one transaction, each still fenced on its own.

The worker's Committer sends the checkpoints of several runs as one statement
(and their completions as another): a lost lease or a stale history in one run
must leave the others' writes intact, and an error in one unit must not fail
the others.
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
from perdure.store.writes import Checkpoint, Completion, Release

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


def _checkpoint(app: perdure.App, fence: Fence, position: int, output: str = "1") -> Checkpoint:
    return Checkpoint(
        fence,
        position,
        f"s{position}",
        "step",
        "completed",
        1,
        datetime.now(UTC),
        output,
        lease_seconds=30,
    )


def test_merged_checkpoints_are_fenced_one_by_one(app: perdure.App, db: Conn) -> None:
    async def main() -> list[Fenced]:
        store, tasks = await _claimed(app, 3)
        stale = Fence(tasks[1].fence.task_id, "w1", tasks[1].fence.attempt + 1)
        checkpoints = [
            _checkpoint(app, tasks[0].fence, 0),
            _checkpoint(app, stale, 0),
            _checkpoint(app, tasks[2].fence, 0),
        ]
        try:
            return await store.write_checkpoints(checkpoints)
        finally:
            await store.close()

    results = asyncio.run(main())
    ours = Fenced(leased=True, written=True, run_status="running")
    assert results == [ours, Fenced(leased=False, written=False), ours]
    assert db.execute("SELECT count(*) FROM steps").fetchone() == (2,)
    events = db.execute("SELECT event, count(*) FROM history GROUP BY event").fetchall()
    assert dict(events)["step_completed"] == 2


def test_merged_completions_finish_each_run_or_leave_its_task(app: perdure.App, db: Conn) -> None:
    async def main() -> tuple[list[Fenced], list[ClaimedTask]]:
        store, tasks = await _claimed(app, 3)
        # The second run's position 0 already holds a final checkpoint: its
        # replay was stale, so it must keep its task and not complete.
        await store.write_checkpoints([_checkpoint(app, tasks[1].fence, 0)])
        completions = [Completion(t.fence, '"done"', _checkpoint(app, t.fence, 0)) for t in tasks]
        try:
            return await store.complete_runs(completions), tasks
        finally:
            await store.close()

    results, tasks = asyncio.run(main())
    done, stale = Fenced(leased=True), Fenced(leased=True, written=False, changed=False)
    assert results == [done, stale, done]
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
                return _checkpoint(app, task.fence, 0, output)

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
    assert first == ours and third == ours
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

    async def main() -> Fenced:
        store, tasks = await _claimed(app, 1)
        committer = Committer(store)  # never started
        try:
            return await committer.write(_checkpoint(app, tasks[0].fence, 0))
        finally:
            await store.close()

    assert asyncio.run(main()) == Fenced(leased=True, written=True, run_status="running")
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
                asyncio.ensure_future(committer.write(_checkpoint(app, t.fence, 0))) for t in tasks
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
                asyncio.ensure_future(committer.write(_checkpoint(app, t.fence, 0))) for t in tasks
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


def test_completions_with_and_without_a_last_checkpoint_are_one_statement(
    app: perdure.App, db: Conn
) -> None:
    """One form of completion: a run finished alone and one finished with its last
    step's checkpoint go in the same statement, each fenced on its own task."""

    async def main() -> tuple[list[Fenced], list[Fenced], list[ClaimedTask]]:
        store, tasks = await _claimed(app, 4)
        lost = Fence(tasks[3].fence.task_id, "w1", tasks[3].fence.attempt + 1)
        before = store.statement_count
        try:
            written, completed = await store.write_batch(
                [_checkpoint(app, tasks[0].fence, 0)],
                [
                    Completion(tasks[1].fence, '"alone"'),
                    Completion(tasks[2].fence, '"last"', _checkpoint(app, tasks[2].fence, 0)),
                    Completion(lost, '"lost"'),
                ],
            )
            assert store.statement_count - before == 2  # one statement per kind
            return written, completed, tasks
        finally:
            await store.close()

    written, completed, tasks = asyncio.run(main())
    assert written == [Fenced(leased=True, written=True, run_status="running")]
    assert completed == [
        Fenced(leased=True),
        Fenced(leased=True),
        Fenced(leased=False, written=False, changed=False),
    ]
    runs = dict(db.execute("SELECT id::text, status FROM runs").fetchall())
    assert [runs[t.run_id] for t in tasks] == ["running", "completed", "completed", "running"]
    outputs = dict(db.execute("SELECT id::text, output FROM runs").fetchall())
    assert outputs[tasks[1].run_id] == "alone" and outputs[tasks[2].run_id] == "last"
    steps = db.execute("SELECT run_id::text FROM steps ORDER BY run_id").fetchall()
    assert sorted(r for (r,) in steps) == sorted([tasks[0].run_id, tasks[2].run_id])
    # The completions carry their durations, the alone one as the one with a step.
    durations = db.execute(
        "SELECT count(*) FROM history WHERE event = 'run_completed' AND duration IS NOT NULL"
    ).fetchone()
    assert durations == (2,)
    held = {r for (r,) in db.execute("SELECT run_id::text FROM tasks").fetchall()}
    assert held == {tasks[0].run_id, tasks[3].run_id}


def test_releases_are_fenced_one_by_one(app: perdure.App, db: Conn) -> None:
    async def main() -> tuple[list[bool], list[ClaimedTask]]:
        store, tasks = await _claimed(app, 3)
        lost = Fence(tasks[1].fence.task_id, "w1", tasks[1].fence.attempt + 1)
        releases = [
            Release(tasks[0].fence, "run_released", 5.0, failed=True, detail_json='{"x": 1}'),
            Release(lost, "run_released"),
            Release(tasks[2].fence, "run_paused_at_step", paused=True),
        ]
        try:
            return await store.release_tasks(releases), tasks
        finally:
            await store.close()

    released, tasks = asyncio.run(main())
    assert released == [True, False, True]
    rows = db.execute("SELECT run_id::text, status, failures FROM tasks").fetchall()
    by_run = {run: (status, failures) for run, status, failures in rows}
    assert by_run[tasks[0].run_id] == ("ready", 1)
    assert by_run[tasks[1].run_id] == ("claimed", 0)
    assert by_run[tasks[2].run_id] == ("paused", 0)
    detail = db.execute(
        "SELECT detail FROM history WHERE event = 'run_released' AND run_id = %s",
        (tasks[0].run_id,),
    ).fetchone()
    assert detail is not None and detail[0]["x"] == 1 and "available_at" in detail[0]
