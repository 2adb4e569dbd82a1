"""The observability reads the dashboard is built on, against a real PostgreSQL.

Its runs list and counts take one perdure.RunFilter: app.list_runs and app.count_runs.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import RunFilter
from perdure.dashboard.data import DashboardData
from perdure.testing import drain

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def define(app: perdure.App) -> None:
    """Two versions of one workflow, one on a queue of its own, one that publishes an event."""

    @app.workflow("echo", version=1)
    def echo_v1(ctx: perdure.SyncContext, value: Any) -> Any:
        return value

    @app.workflow("echo", version=2)
    def echo_v2(ctx: perdure.SyncContext, value: Any) -> Any:
        return value

    @app.workflow("special", queue="lane")
    def special(ctx: perdure.SyncContext, value: Any) -> Any:
        ctx.set_event("url", f"https://example.com/{value}")
        return value

    app.register()


def test_the_runs_list_pages_by_cursor_with_every_filter_of_the_form(app: perdure.App) -> None:
    # The dashboard's runs page is app.list_runs with a RunFilter's criteria.
    define(app)
    first = app.start("echo", 1, version=1, key="a:1", tags={"team": "red"})
    app.start("echo", 2, version=2, key="a:2", tags={"team": "blue"})
    app.start("echo", 3, version=2, key="b:1")
    app.start("special", 4, key="a%", tags={"team": "red"})
    drain(app)
    data = DashboardData(app)

    def keys(**criteria: Any) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            page = data.runs_page(RunFilter(**criteria), cursor=cursor, limit=1)
            seen += [r.key or r.id for r in page.runs]
            if page.next_cursor is None:
                return seen
            cursor = page.next_cursor

    assert keys() == ["a%", "b:1", "a:2", "a:1"]  # newest first, one run a page
    assert keys(workflow="echo", version=2) == ["b:1", "a:2"]
    assert keys(queue="lane") == ["a%"]
    assert keys(key_prefix="a:") == ["a:2", "a:1"]
    assert keys(key_prefix="%") == []  # a prefix, never a LIKE pattern
    assert keys(status="completed", tags={"team": "red"}) == ["a%", "a:1"]
    worker = app.get_run("a:1").worker_id
    assert worker is not None and len(keys(worker=worker)) == 4
    assert keys(worker="nobody") == []
    created = first.get().created_at
    assert keys(since=created, before=created) == []
    assert keys(before=datetime.now(UTC) + timedelta(hours=1), since=created)[-1] == "a:1"
    page = data.runs_page(RunFilter(tags={"team": "red"}), cursor=None, limit=50)
    assert page.counts["completed"] == 2 and sum(page.counts.values()) == 2


def test_count_runs_counts_each_status_up_to_the_cap(app: perdure.App) -> None:
    define(app)
    for i in range(3):
        app.start("echo", i, version=1)
    tagged = app.start("special", 9, tags={"kind": "odd"})
    counts = app.count_runs()
    assert counts["queued"] == 4 and counts["completed"] == 0
    assert set(counts) == {s.value for s in perdure.RunStatus}
    assert app.count_runs(cap=2)["queued"] == 2
    assert app.count_runs(RunFilter(queue="lane"))["queued"] == 1
    # A narrowing filter counts the newest matching runs, at most cap of them.
    assert app.count_runs(RunFilter(workflow="echo"))["queued"] == 3
    assert sum(app.count_runs(RunFilter(workflow="echo"), cap=2).values()) == 2
    # The status filter does not narrow the counts: the page shows them all.
    assert app.count_runs(RunFilter(status="completed"))["queued"] == 4
    # Every criterion of RunFilter counts, with or without a narrowing one.
    since = app.get_run(tagged.id).created_at
    assert app.count_runs(RunFilter(since=since))["queued"] == 1
    assert app.count_runs(RunFilter(tags={"kind": "odd"}))["queued"] == 1
    assert app.count_runs(RunFilter(runs=(tagged.id,)))["queued"] == 1
    assert app.count_runs(RunFilter(parent=tagged.id))["queued"] == 0
    assert app.count_runs(RunFilter(since=since, tags={"kind": "even"}))["queued"] == 0


def test_run_activity_buckets_runs_by_creation_and_status(app: perdure.App) -> None:
    define(app)
    for i in range(3):
        app.start("echo", i, version=1)
    drain(app)
    app.start("echo", 9, version=1)
    since = datetime.now(UTC) - timedelta(hours=1)
    rows = app.run_activity(since=since, bucket_seconds=60)
    totals: dict[str, int] = {}
    for row in rows:
        assert since <= row["bucket"] <= datetime.now(UTC)
        totals[row["status"]] = totals.get(row["status"], 0) + row["n"]
    assert totals == {"completed": 3, "queued": 1}
    assert app.run_activity(since=datetime.now(UTC) + timedelta(minutes=5), bucket_seconds=60) == []


def test_held_tasks_and_queue_ages_show_what_is_held_and_what_waits(app: perdure.App) -> None:
    release = threading.Event()

    @app.workflow("hold")
    def hold(ctx: perdure.SyncContext, value: Any) -> Any:
        return ctx.step("block", lambda: release.wait(30))

    @app.workflow("idle", queue="nobody-serves-this")
    def idle(ctx: perdure.SyncContext, value: Any) -> Any:
        return value

    app.register()
    waiting = app.start("idle", 1)
    with BackgroundWorker(app, queues=["hold"], **FAST):
        held = app.start("hold", 1)
        wait_until(lambda: app.held_tasks(), 20, what="a held task")
        (task,) = app.held_tasks()
        assert task["run_id"] == held.id and task["workflow"] == "hold"
        assert task["kind"] == "run" and task["claimed_at"] is not None
        (worker,) = [w for w in app.workers() if w.status == "running"]
        assert task["worker_id"] == worker.id and worker.held == 1
        heads = {q.name: q for q in app.queues() if q.ready}
        assert set(heads) == {"nobody-serves-this"}
        assert heads["nobody-serves-this"].ready == 1
        oldest = heads["nobody-serves-this"].oldest_seconds
        assert oldest is not None and oldest >= 0
        assert oldest <= (datetime.now(UTC) - waiting.get().created_at).total_seconds() + 1
        release.set()
        assert held.result(timeout=20) is True
    assert app.held_tasks() == []


def test_registered_workflows_lists_versions_without_counting_runs(app: perdure.App) -> None:
    define(app)
    app.start("echo", 1, version=1)
    found = [(w.name, w.version, w.queue, w.counts) for w in app.registered_workflows()]
    assert found == [("echo", 2, "echo", {}), ("echo", 1, "echo", {}), ("special", 1, "lane", {})]
    assert {(w.name, w.version) for w in app.workflows()} == {(n, v) for n, v, _, _ in found}


def test_events_lists_what_a_run_published(app: perdure.App) -> None:
    define(app)
    run = app.start("special", "x1")
    drain(app)
    (event,) = app.events(run.id)
    assert event["key"] == "url" and event["value"] == "https://example.com/x1"
    assert app.events(app.start("echo", 1, version=1).id) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.count_runs(RunFilter(status="nope")), "status must be one of"),
        (lambda app: app.count_runs(RunFilter(version=0)), "version"),
        (lambda app: app.count_runs(RunFilter(key_prefix="")), "key_prefix"),
        (lambda app: app.count_runs(RunFilter(since="yesterday")), "since"),  # type: ignore[arg-type]
        (lambda app: app.count_runs(RunFilter(tags={"a": 1})), "tag"),  # type: ignore[dict-item]
        (lambda app: app.count_runs({"status": "failed"}), "RunFilter"),  # type: ignore[arg-type]
        (lambda app: app.count_runs(cap=0), "cap"),
        (lambda app: app.list_runs(cursor="x"), "cursor"),
        (lambda app: app.list_runs(runs="not-a-list"), "runs"),
        (lambda app: app.run_activity(since="1h", bucket_seconds=60), "since"),  # type: ignore[arg-type]
        (lambda app: app.run_activity(since=datetime.now(UTC), bucket_seconds=0), "bucket"),
        (lambda app: app.held_tasks(limit=0), "limit"),
    ],
)
def test_bad_arguments_are_refused_before_any_query(
    app: perdure.App, call: Any, message: str
) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):
        call(app)
