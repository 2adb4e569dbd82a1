"""Retry resumes a failed run in place at its failed step, for both workflow shapes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import perdure
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
