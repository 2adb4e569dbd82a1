"""The reaper's dead-letter threshold is the workflow's ``max_lapses``, the same on every worker."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from perdure.store.store import execute_sync


def lapse(app: perdure.App, db: psycopg.Connection[Any], times: int) -> None:
    """Claim every ready task as a worker that dies at once, ``times`` times, reaping each time."""
    for _ in range(times):
        claim = app.statements.tasks.claim(
            worker_id="ghost",
            queues=["fragile", "sturdy"],
            names=["fragile", "sturdy"],
            versions=[1, 1],
            limit=10,
            lease_seconds=60,
        )
        assert execute_sync(db, claim)
        db.execute("UPDATE tasks SET lease_expires_at = now() - interval '1 second'")
        execute_sync(db, app.statements.tasks.rescue(limit=100))


def test_each_workflow_dead_letters_at_its_own_max_lapses(
    app: perdure.App, db: psycopg.Connection[Any]
) -> None:
    @app.workflow("fragile", max_lapses=2)
    def fragile(ctx: perdure.SyncContext) -> None:
        return None

    @app.workflow("sturdy")
    def sturdy(ctx: perdure.SyncContext) -> None:
        return None

    app.register()
    assert db.execute("SELECT name, max_lapses FROM workflows ORDER BY name").fetchall() == [
        ("fragile", 2),
        ("sturdy", 5),
    ]
    weak, strong = app.start("fragile"), app.start("sturdy")
    lapse(app, db, 2)
    failed = app.get_run(weak.id)
    assert failed.status == perdure.RunStatus.FAILED
    assert failed.error is not None and failed.error["type"] == "LeaseExpired"
    assert app.get_run(strong.id).status == perdure.RunStatus.QUEUED
    lapse(app, db, 3)
    assert app.get_run(strong.id).status == perdure.RunStatus.FAILED


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, True])
def test_a_bad_max_lapses_is_refused(app: perdure.App, bad: Any) -> None:
    with pytest.raises(perdure.WorkflowDefinitionError, match="max_lapses"):

        @app.workflow("bad", max_lapses=bad)
        def wf(ctx: perdure.SyncContext) -> None:
            return None
