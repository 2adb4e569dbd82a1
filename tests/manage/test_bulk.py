"""Bulk cancel and retry by filter: the dry run counts exactly what is then acted on."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from manage.conftest import Ledger
from perdure.testing import drain


def _jobs(app: perdure.App, ledger: Ledger, broken: dict[str, bool]) -> None:
    def work(run_id: str, n: int) -> int:
        ledger.note(run_id, "work")
        return n

    def finish(run_id: str, fail: bool) -> str:
        ledger.note(run_id, "finish")
        if fail and broken["on"]:
            raise perdure.PermanentError("downstream service is down")
        return "done"

    for name in ("job", "other"):

        @app.workflow(name)
        async def job(ctx: perdure.Context, params: dict[str, Any]) -> str:
            await ctx.step("work", work, ctx.run_id, params["n"])
            return await ctx.step("finish", finish, ctx.run_id, params["fail"])


def _statuses(app: perdure.App, handles: list[perdure.RunHandle]) -> set[str]:
    return {h.status().value for h in handles}


def test_bulk_retry_dry_run_counts_exactly_the_runs_then_retried(
    app: perdure.App, ledger: Ledger, db: psycopg.Connection[Any]
) -> None:
    broken = {"on": True}
    _jobs(app, ledger, broken)
    failing = [app.start("job", {"n": i, "fail": True}) for i in range(7)]
    fine = [app.start("job", {"n": i, "fail": False}) for i in range(2)]
    others = [app.start("other", {"n": i, "fail": True}) for i in range(3)]
    old = app.start("job", {"n": 99, "fail": True})
    drain(app)
    assert _statuses(app, [*failing, *others, old]) == {"failed"}
    assert _statuses(app, fine) == {"completed"}
    db.execute(
        "UPDATE runs SET created_at = created_at - interval '3 hours' WHERE id = %s", (old.id,)
    )
    since = db.execute("SELECT now() - interval '1 hour'").fetchone()[0]
    wanted = perdure.RunFilter(workflow="job", status="failed", since=since)

    preview = app.retry_runs(wanted, dry_run=True, batch_size=3)
    assert preview.dry_run and preview.operation == "retry"
    assert preview.count == 7
    assert {r.id for r in preview.runs} == {h.id for h in failing}
    assert [r.created_at for r in preview.runs] == sorted(
        (r.created_at for r in preview.runs), reverse=True
    )
    assert _statuses(app, failing) == {"failed"}, "a dry run changed something"

    broken["on"] = False
    done = app.retry_runs(wanted, batch_size=3)
    assert not done.dry_run and done.skipped == []
    assert [r.id for r in done.runs] == [r.id for r in preview.runs]
    drain(app)
    assert _statuses(app, failing) == {"completed"}
    assert _statuses(app, [*others, old]) == {"failed"}, "a run outside the filter was retried"
    for handle in failing:
        # Resumed at the failed step: 'work' ran once, 'finish' twice.
        assert ledger.counts(handle.id) == {"work": 1, "finish": 2}
    # Nothing left to retry: a second pass matches nothing.
    assert app.retry_runs(wanted).count == 0


def test_bulk_cancel_dry_run_then_cancel_in_batches(
    app: perdure.App, ledger: Ledger, db: psycopg.Connection[Any]
) -> None:
    _jobs(app, ledger, {"on": False})
    queued = [app.start("job", {"n": i, "fail": False}) for i in range(5)]
    others = [app.start("other", {"n": i, "fail": False}) for i in range(2)]
    wanted = perdure.RunFilter(workflow="job")
    # 'job' runs that are not cancellable are not counted: a failed one, say.
    preview = app.cancel_runs(wanted, dry_run=True, batch_size=2)
    assert preview.count == 5
    assert app.cancel_runs(wanted, dry_run=True, limit=3).count == 3
    assert (
        app.cancel_runs(perdure.RunFilter(workflow="job", status="failed"), dry_run=True).runs == []
    )

    done = app.cancel_runs(wanted, batch_size=2, reason="maintenance window")
    assert {r.id for r in done.runs} == {r.id for r in preview.runs}
    assert done.count == preview.count
    assert _statuses(app, queued) == {"cancelled"}
    assert _statuses(app, others) == {"queued"}
    assert queued[0].get().error == {"type": "Cancelled", "message": "maintenance window"}
    # Their queued tasks are gone: a worker finds nothing of theirs to run.
    drain(app)
    assert _statuses(app, queued) == {"cancelled"}
    assert all(ledger.counts(h.id) == {} for h in queued)
    # Cancelled runs are what a bulk retry picks up next.
    again = app.retry_runs(perdure.RunFilter(status="cancelled"), dry_run=True)
    assert {r.id for r in again.runs} == {h.id for h in queued}


def test_bulk_operations_on_given_runs_only(app: perdure.App, ledger: Ledger) -> None:
    _jobs(app, ledger, {"on": False})
    handles = [app.start("job", {"n": i, "fail": False}) for i in range(4)]
    chosen = perdure.RunFilter(runs=(handles[0].id, handles[2].id))
    assert {r.id for r in app.cancel_runs(chosen).runs} == {handles[0].id, handles[2].id}
    assert [h.status().value for h in handles] == ["cancelled", "queued", "cancelled", "queued"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.cancel_runs({"status": "failed"}), "filter must be a perdure.RunFilter"),
        (lambda app: app.retry_runs(perdure.RunFilter(status="nope")), "status must be one of"),
        (lambda app: app.retry_runs(perdure.RunFilter(runs=("x",))), "must be a run id"),
        (lambda app: app.cancel_runs(perdure.RunFilter(), batch_size=0), "batch_size"),
        (lambda app: app.cancel_runs(perdure.RunFilter(), reason="a\x00b"), "reason"),
        (lambda app: app.retry_runs(perdure.RunFilter(), dry_run="yes"), "dry_run"),
    ],
)
def test_bad_bulk_arguments_are_refused(app: perdure.App, call: Any, message: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):
        call(app)
