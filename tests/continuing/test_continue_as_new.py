"""ctx.continue_as_new: a run ends 'continued' and its successor takes over, in one write."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from perdure import testing
from perdure.errors import ConfigurationError


def _counter(app: perdure.App, every: int = 3, version: int = 1) -> None:
    """An entity loop: counts to its input's 'until', continuing every ``every`` steps."""

    @app.workflow("counter", version=version)
    async def counter(ctx: perdure.Context, state: dict[str, Any]) -> dict[str, Any]:
        n = state["n"]
        for _ in range(every):
            if n >= state["until"]:
                return {"n": n, "version": ctx.version}
            n = await ctx.step("inc", lambda v: v + 1, n)
        try:
            await ctx.continue_as_new({"n": n, "until": state["until"]})
        except Exception:  # a workflow cannot swallow the continuation
            raise AssertionError("continue_as_new was caught as an Exception") from None
        raise AssertionError("continue_as_new returned")


def _chain(db: psycopg.Connection[Any], first: str) -> list[tuple[Any, ...]]:
    """(id, status, key, continued_from, continued_to) of each run of the chain, in order."""
    found = []
    run_id: Any = first
    while run_id is not None:
        row = db.execute(
            "SELECT id::text, status, key, continued_from::text, continued_to::text"
            " FROM runs WHERE id = %s",
            (run_id,),
        ).fetchone()
        assert row is not None
        found.append(row)
        run_id = row[4]
    return found


def test_a_loop_keeps_its_key_and_the_first_handle_gets_the_final_result(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app()
    _counter(app)
    first = app.start("counter", {"n": 0, "until": 10}, key="entity-1")
    testing.drain(app)
    assert first.result(timeout=10) == {"n": 10, "version": 1}
    assert first.status() == perdure.RunStatus.CONTINUED
    chain = _chain(db, first.id)
    # 3 steps a run: runs of 3, 3, 3 and the last of 1.
    assert [row[1] for row in chain] == ["continued"] * 3 + ["completed"]
    assert [row[2] for row in chain] == [None, None, None, "entity-1"]
    assert [row[3] for row in chain] == [None, *(row[0] for row in chain[:-1])]
    # The key finds the live end of the chain; a start with it answers that run.
    assert app.get_run("entity-1").id == chain[-1][0]
    assert app.start("counter", {"n": 0, "until": 1}, key="entity-1").id == chain[-1][0]
    # The SQL surface follows the chain too.
    status = db.execute("SELECT id::text, status, output FROM run_status(%s)", (first.id,))
    assert status.fetchone() == (chain[-1][0], "completed", {"n": 10, "version": 1})
    # Each run's history is its own: bounded by one run's work, not the chain's.
    steps = db.execute(
        "SELECT run_id::text, count(*) FROM steps GROUP BY run_id ORDER BY min(completed_at)"
    ).fetchall()
    assert [n for _, n in steps] == [3, 3, 3, 1]


def test_a_sync_workflow_continues_too(make_app: Any) -> None:
    app = make_app()

    @app.workflow("sync_counter")
    def sync_counter(ctx: perdure.SyncContext, n: int) -> int:
        n = ctx.step("inc", lambda v: v + 1, n)
        if n < 4:
            ctx.continue_as_new(n)
        return n

    run = app.start("sync_counter", 0)
    testing.drain(app)
    assert run.result(timeout=10) == 4


def test_unconsumed_signals_carry_over(make_app: Any, db: psycopg.Connection[Any]) -> None:
    app = make_app()

    @app.workflow("inbox")
    async def inbox(ctx: perdure.Context, taken: list[str]) -> list[str]:
        taken = [*taken, await ctx.wait_for_signal("item")]
        if len(taken) < 3:
            await ctx.continue_as_new(taken)
        return taken

    run = app.start("inbox", [], key="inbox-1")
    for item in ("a", "b", "c"):  # all sent before the first run takes one
        app.signal(run.id, "item", item)
    testing.drain(app)
    assert run.result(timeout=10) == ["a", "b", "c"]
    chain = _chain(db, run.id)
    assert len(chain) == 3
    moved = db.execute("SELECT run_id::text, payload FROM signals ORDER BY id").fetchall()
    # Each signal was taken by the run of the chain that was live then.
    assert moved == [(chain[0][0], "a"), (chain[1][0], "b"), (chain[2][0], "c")]


def test_version_newest_moves_the_successor_to_the_newest_registered_version(
    make_app: Any,
) -> None:
    old = make_app()

    @old.workflow("upgrade", version=1)
    async def v1(ctx: perdure.Context, n: int) -> str:
        await ctx.wait_for_signal("go")
        await ctx.continue_as_new(n + 1, version="newest")
        return "unreachable"

    run = old.start("upgrade", 0)
    testing.drain(old)

    new = make_app()

    @new.workflow("upgrade", version=2)
    async def v2(ctx: perdure.Context, n: int) -> str:
        return f"v{ctx.version} got {n}"

    testing.drain(new)  # its worker registers version 2 in the database
    new.signal(run.id, "go", None)
    testing.drain(old)  # version 1's worker continues; version 2's runs the successor
    testing.drain(new)
    assert run.result(timeout=10) == "v2 got 1"
    successor = new.get_run(run.get().continued_to or "")
    assert successor.version == 2 and successor.continued_from == run.id


def test_without_version_the_successor_keeps_the_run_s_version(make_app: Any) -> None:
    app = make_app()
    _counter(app, every=2, version=1)
    newer = make_app()
    _counter(newer, every=2, version=2)
    run = app.start("counter", {"n": 0, "until": 3}, version=1)
    testing.drain(app)
    assert run.result(timeout=10) == {"n": 3, "version": 1}


def test_a_bad_version_is_refused(make_app: Any) -> None:
    app = make_app()

    @app.workflow("bad", retry=perdure.RetryPolicy(max_attempts=1))
    async def bad(ctx: perdure.Context) -> None:
        await ctx.continue_as_new(None, version="latest")

    run = app.start("bad")
    testing.drain(app)
    with pytest.raises(perdure.errors.RunFailed, match="'newest'"):
        run.result(timeout=10)
    assert ConfigurationError.__name__ in str(run.get().error)


def _claim_by_hand(db: psycopg.Connection[Any], run_id: str) -> int:
    """Mark the run's task claimed by worker 'w', attempt 1 (as a claim would); its id."""
    row = db.execute(
        "UPDATE tasks SET status = 'claimed', worker_id = 'w', attempt = 1"
        " WHERE run_id = %s RETURNING id",
        (run_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _continue(db: psycopg.Connection[Any], task_id: int, worker: str) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT leased, changed, new_id FROM continue_run(%s, %s, 1, gen_random_uuid(),"
        " '{\"n\": 1}'::jsonb, false, now())",
        (task_id, worker),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_continuation_under_another_worker_s_lease_writes_nothing(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app()
    _counter(app)
    run = app.start("counter", {"n": 0, "until": 5}, key="fenced")
    task_id = _claim_by_hand(db, run.id)
    assert _continue(db, task_id, "someone-else") == (False, False, None)
    assert db.execute("SELECT count(*), min(status), min(key) FROM runs").fetchone() == (
        1,
        "queued",
        "fenced",
    )
    assert db.execute("SELECT count(*) FROM tasks").fetchone() == (1,)


def test_a_run_cancelled_while_it_continued_starts_no_successor(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app()
    _counter(app)
    run = app.start("counter", {"n": 0, "until": 5}, key="cancelled")
    task_id = _claim_by_hand(db, run.id)
    app.cancel(run.id)  # the claimed task is left to its worker
    leased, changed, _ = _continue(db, task_id, "w")
    assert (leased, changed) == (True, False)
    assert db.execute("SELECT count(*), min(status) FROM runs").fetchone() == (1, "cancelled")
    assert db.execute("SELECT count(*) FROM tasks").fetchone() == (0,)


def test_each_run_of_a_long_chain_holds_the_same_history(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app()
    _counter(app, every=5)
    run = app.start("counter", {"n": 0, "until": 40})
    testing.drain(app)
    assert run.result(timeout=30) == {"n": 40, "version": 1}
    per_run = db.execute(
        "SELECT r.id, (SELECT count(*) FROM steps s WHERE s.run_id = r.id),"
        " (SELECT count(*) FROM history h WHERE h.run_id = r.id)"
        " FROM runs r WHERE r.status = 'continued'"
    ).fetchall()
    assert len(per_run) == 8
    # No growth along the chain: every continued run holds 5 steps and as much history.
    assert {steps for _, steps, _ in per_run} == {5}
    assert len({history for _, _, history in per_run}) == 1


def test_a_signal_to_the_first_run_s_id_reaches_the_live_end_of_the_chain(
    make_app: Any, db: psycopg.Connection[Any]
) -> None:
    app = make_app()

    @app.workflow("relay")
    async def relay(ctx: perdure.Context, hops: int) -> str:
        if hops < 2:
            await ctx.continue_as_new(hops + 1)
        return str(await ctx.wait_for_signal("done"))

    run = app.start("relay", 0)
    testing.drain(app)  # two continuations, then the third run waits
    app.signal(run.id, "done", "via the first id")
    testing.drain(app)
    assert run.result(timeout=10) == "via the first id"
    (taker,) = db.execute("SELECT run_id::text FROM signals").fetchone() or (None,)
    assert taker == _chain(db, run.id)[-1][0]


def test_a_parent_gets_the_result_of_a_child_that_continued(make_app: Any) -> None:
    app = make_app()
    _counter(app, every=2)

    @app.workflow("parent")
    async def parent(ctx: perdure.Context) -> dict[str, Any]:
        child = await ctx.start_child("counter", {"n": 0, "until": 5})
        result: dict[str, Any] = await child.result()
        return result

    run = app.start("parent")
    testing.drain(app)
    assert run.result(timeout=20) == {"n": 5, "version": 1}
