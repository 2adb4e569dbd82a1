"""Retry resumes a failed run in place at its failed step, for both workflow shapes."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker
from manage.conftest import Ledger
from perdure.testing import drain


def test_retry_of_a_function_workflow_resumes_at_the_failed_step(
    app: perdure.App, ledger: Ledger
) -> None:
    broken = {"on": True}

    def step(run_id: str, name: str) -> str:
        ledger.note(run_id, name)
        if name == "b" and broken["on"]:
            raise perdure.PermanentError("b is broken")
        return name

    @app.workflow("abc")
    def abc(ctx: perdure.SyncContext) -> list[str]:
        return [ctx.step(n, step, ctx.run_id, n) for n in ("a", "b", "c")]

    run = app.start("abc")
    drain(app)
    assert run.status() == perdure.RunStatus.FAILED
    broken["on"] = False
    assert app.retry(run.id) == run
    assert app.run_until_complete(run) == ["a", "b", "c"]
    assert ledger.counts(run.id) == {"a": 1, "b": 2, "c": 1}
    first_a = [s for s in app.steps(run.id) if s.name == "a"]
    assert len(first_a) == 1 and first_a[0].attempts == 1


def test_retry_of_a_graph_workflow_resumes_at_the_failed_step(
    app: perdure.App, ledger: Ledger
) -> None:
    """a -> b -> c, and d beside them: after b fails, a retry runs b and c only."""
    broken = {"on": True}
    g = app.graph("abcd")

    @g.step()
    def a(ctx: perdure.StepContext, x: int) -> int:
        ledger.note(ctx.run_id, "a")
        return x + 1

    @g.step(depends_on=[a])
    def b(ctx: perdure.StepContext, x: int) -> int:
        ledger.note(ctx.run_id, "b")
        if broken["on"]:
            raise perdure.PermanentError("b is broken")
        return x * 10

    @g.step(depends_on=[b])
    def c(ctx: perdure.StepContext, x: int) -> int:
        ledger.note(ctx.run_id, "c")
        return x + 5

    @g.step()
    def d(ctx: perdure.StepContext, x: int) -> str:
        ledger.note(ctx.run_id, "d")
        return f"d{x}"

    run = app.start("abcd", 1)
    drain(app)
    assert run.status() == perdure.RunStatus.FAILED
    statuses: dict[str, Any] = {s.name: s.status.value for s in app.steps(run.id)}
    # d completed, or was cancelled before it started when b failed first.
    assert (statuses["a"], statuses["b"]) == ("completed", "failed") and "c" not in statuses
    broken["on"] = False
    app.retry(run.id)
    assert app.run_until_complete(run) == {"c": 25, "d": "d1"}
    assert ledger.counts(run.id) == {"a": 1, "b": 2, "c": 1, "d": 1}


def test_retrying_twice_at_once_or_while_queued_or_running_duplicates_nothing(
    app: perdure.App, ledger: Ledger, db: Any
) -> None:
    broken = {"on": True}
    entered, release = threading.Event(), threading.Event()

    def step(run_id: str, name: str) -> str:
        ledger.note(run_id, name)
        if name == "b" and broken["on"]:
            raise perdure.PermanentError("b is broken")
        if name == "c":
            entered.set()
            release.wait(20)
        return name

    @app.workflow("abc")
    def abc(ctx: perdure.SyncContext) -> list[str]:
        return [ctx.step(n, step, ctx.run_id, n) for n in ("a", "b", "c")]

    run = app.start("abc")
    drain(app)
    assert run.status() == perdure.RunStatus.FAILED
    broken["on"] = False

    # Ten retries at once: one queues the run, the nine others find it queued.
    outcomes: list[str] = []
    barrier = threading.Barrier(10)

    def retry() -> None:
        barrier.wait(10)
        try:
            app.retry(run.id)
            outcomes.append("queued")
        except perdure.InvalidRunState:
            outcomes.append("refused")

    threads = [threading.Thread(target=retry) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["queued"] + ["refused"] * 9

    def tasks() -> int:
        found = db.execute("SELECT count(*) FROM tasks WHERE run_id = %s", (run.id,)).fetchone()
        return int(found[0])

    # Queued: retrying again is refused and adds no task.
    with pytest.raises(perdure.InvalidRunState, match="retry"):
        app.retry(run.id)
    assert tasks() == 1
    # Running: refused as well, and the run goes on once.
    with BackgroundWorker(app, concurrency=2, poll_seconds=0.05, lease_seconds=5):
        assert entered.wait(20)
        with pytest.raises(perdure.InvalidRunState, match="retry"):
            app.retry(run.id)
        release.set()
        assert run.result(timeout=30) == ["a", "b", "c"]
    assert ledger.counts(run.id) == {"a": 1, "b": 2, "c": 1}
    assert tasks() == 0
    retried = db.execute(
        "SELECT count(*) FROM history WHERE run_id = %s AND event = 'run_retried'", (run.id,)
    ).fetchone()
    assert retried is not None and retried[0] <= 1


def test_retry_of_an_archived_run_says_it_is_archived(app: perdure.App, db: Any) -> None:
    @app.workflow("broken")
    def broken(ctx: perdure.SyncContext) -> None:
        raise perdure.PermanentError("no")

    run = app.start("broken")
    drain(app)
    db.execute("UPDATE runs SET completed_at = now() - interval '2 days' WHERE id = %s", [run.id])
    assert app.prune(timedelta(days=1), archive=True).runs == 1
    assert app.get_run(run.id).archived

    with pytest.raises(perdure.InvalidRunState) as refused:
        app.retry(run.id)
    assert refused.value.status == "archived"
    assert "it is archived" in str(refused.value)
    assert app.get_run(run.id).status == perdure.RunStatus.FAILED
