"""Queue features on one worker: dedup, debounce, delay, tags, per-key rate limits, listings.

Time is a VirtualClock: a window, a delay or a rate period passes when the
test moves the clock, and `testing.drain` runs what is due at that moment.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import perdure
from helpers import (
    BackgroundWorker,
    claimed_while_queue_settings_locked,
    sent_statements,
    wait_until,
)
from perdure import testing
from perdure.cli.main import cli


@pytest.fixture
def clock() -> perdure.VirtualClock:
    return perdure.VirtualClock()


@pytest.fixture
def vapp(make_app: Callable[..., perdure.App], clock: perdure.VirtualClock) -> perdure.App:
    """An App on the virtual clock with workflow "echo" (queue "jobs"): returns its input."""
    app = make_app(clock=clock)

    @app.workflow("echo", queue="jobs")
    def echo(ctx: perdure.SyncContext, value: Any) -> Any:
        return ctx.step("echo", lambda: value)

    return app


def completed(app: perdure.App) -> list[Any]:
    """The outputs of completed runs, oldest first."""
    runs = app.list_runs(status="completed", limit=1000)
    return [r.output for r in sorted(runs, key=lambda r: (r.created_at, r.id))]


def test_a_dedup_key_returns_the_run_waiting_to_start_then_allows_a_new_one(
    vapp: perdure.App,
) -> None:
    first = vapp.start("echo", 1, dedup_key="refresh:7")
    again = vapp.start("echo", 2, dedup_key="refresh:7")
    other = vapp.start("echo", 3, dedup_key="refresh:8")
    assert (again.id, again.created, first.created) == (first.id, False, True)
    assert other.id != first.id
    testing.drain(vapp)
    assert first.result(timeout=5) == 1 and other.result(timeout=5) == 3
    # Once the run has started, the key is free: a new start makes a new run.
    later = vapp.start("echo", 4, dedup_key="refresh:7")
    assert later.created and later.id != first.id
    assert vapp.get_run(later.id).dedup_key == "refresh:7"


def test_concurrent_starts_with_one_dedup_key_make_one_run(vapp: perdure.App) -> None:
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def start(n: int) -> None:
        barrier.wait(timeout=10)
        ids.append(vapp.start("echo", n, dedup_key="once").id)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert len(vapp.list_runs(limit=100)) == 1


def test_debounce_collapses_starts_into_one_run_with_the_latest_input(
    vapp: perdure.App, clock: perdure.VirtualClock
) -> None:
    handles = [vapp.start("echo", {"n": n}, dedup_key="reindex", debounce=30) for n in range(3)]
    assert len({h.id for h in handles}) == 1
    assert [h.created for h in handles] == [True, False, False]
    testing.drain(vapp)
    assert vapp.get_run(handles[0].id).status == perdure.RunStatus.QUEUED  # the window is open
    clock.advance(seconds=10)
    vapp.start("echo", {"n": 3}, dedup_key="reindex", debounce=30)
    clock.advance(seconds=21)  # the window, opened by the first start, has ended
    testing.drain(vapp)
    assert handles[0].result(timeout=5) == {"n": 3}
    events = [e.event for e in vapp.history(handles[0].id)]
    assert events.count("run_debounced") == 3 and events.count("run_created") == 1
    # After the run started, the next burst makes a new run.
    nxt = vapp.start("echo", {"n": 4}, dedup_key="reindex", debounce=30)
    assert nxt.created and nxt.id != handles[0].id


def test_debounce_with_a_key_collapses_until_the_run_starts(
    vapp: perdure.App, clock: perdure.VirtualClock
) -> None:
    first = vapp.start("echo", "a", key="k", debounce=5)
    assert vapp.start("echo", "b", key="k", debounce=5).id == first.id
    clock.advance(seconds=6)
    testing.drain(vapp)
    assert first.result(timeout=5) == "b"
    # A key names one run for good: once it started, the same key returns it.
    assert vapp.start("echo", "c", key="k", debounce=5).id == first.id
    assert vapp.get_run(first.id).input == "b"


def test_a_delayed_start_runs_when_its_delay_has_passed(
    vapp: perdure.App, clock: perdure.VirtualClock
) -> None:
    later = vapp.start("echo", "later", delay=60)
    now = vapp.start("echo", "now")
    testing.drain(vapp)
    assert now.result(timeout=5) == "now"
    assert vapp.get_run(later.id).status == perdure.RunStatus.QUEUED
    clock.advance(seconds=59)
    testing.drain(vapp)
    assert vapp.get_run(later.id).status == perdure.RunStatus.QUEUED
    clock.advance(seconds=1)
    testing.drain(vapp)
    assert later.result(timeout=5) == "later"


def test_tags_are_stored_and_filter_runs(vapp: perdure.App, pg_url: str, schema: str) -> None:
    seven = vapp.start("echo", 1, tags={"customer": "7", "plan": "pro"})
    vapp.start("echo", 2, tags={"customer": "8", "plan": "pro"})
    vapp.start("echo", 3)
    assert vapp.get_run(seven.id).tags == {"customer": "7", "plan": "pro"}
    assert [r.id for r in vapp.list_runs(tags={"customer": "7"})] == [seven.id]
    assert len(vapp.list_runs(tags={"plan": "pro"})) == 2
    assert vapp.list_runs(tags={"customer": "9"}) == []
    base = ["--database-url", pg_url, "--schema", schema, "runs", "list"]
    shown = CliRunner().invoke(cli, [*base, "--tag", "customer=7", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [r["id"] for r in json.loads(shown.output)["runs"]] == [seven.id]
    both = CliRunner().invoke(cli, [*base, "--tag", "plan=pro", "--tag", "customer=8", "--json"])
    assert [r["input"] for r in json.loads(both.output)["runs"]] == [2]
    bad = CliRunner().invoke(cli, [*base, "--tag", "customer"])
    assert bad.exit_code == 2 and "is not NAME=VALUE" in bad.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tags": {"customer": 7}}, "the value of tag 'customer'"),
        ({"tags": ["customer"]}, "tags must be a dict"),
        ({"partition_key": 7}, "partition_key"),
        ({"dedup_key": "x\x00y"}, "dedup_key"),
        ({"debounce": 5}, "debounce needs a key or a dedup_key"),
        ({"debounce": -1, "key": "k"}, "debounce"),
        ({"debounce": 5, "key": "k", "delay": 3}, "give delay or debounce"),
    ],
)
def test_bad_queueing_options_are_refused_before_anything_is_written(
    vapp: perdure.App, db: psycopg.Connection[Any], options: dict[str, Any], message: str
) -> None:
    vapp.start("echo", 0)  # the schema exists
    with pytest.raises(perdure.ConfigurationError, match=message):
        vapp.start("echo", 1, **options)
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_per_key_rate_limit_lets_each_key_its_own_budget(
    vapp: perdure.App, clock: perdure.VirtualClock, db: psycopg.Connection[Any]
) -> None:
    vapp.set_queue("jobs", rate_limit=(2, 60), rate_per_key=True)
    for key in ("a", "b"):
        for n in range(3):
            vapp.start("echo", f"{key}{n}", partition_key=key)
    testing.drain(vapp)
    assert sorted(completed(vapp)) == ["a0", "a1", "b0", "b1"]
    clock.advance(seconds=59)
    testing.drain(vapp)
    assert len(completed(vapp)) == 4
    clock.advance(seconds=1)
    testing.drain(vapp)
    assert sorted(completed(vapp)) == ["a0", "a1", "a2", "b0", "b1", "b2"]
    # Claims that left their window are dropped by later claims.
    assert db.execute("SELECT count(*) FROM queue_starts").fetchone() == (2,)


def test_a_queue_rate_limit_counts_the_whole_queue(
    vapp: perdure.App, clock: perdure.VirtualClock
) -> None:
    vapp.set_queue("jobs", rate_limit=(3, 10))
    for n in range(7):
        vapp.start("echo", n, partition_key=f"k{n}")
    for expected in (3, 6, 7):
        testing.drain(vapp)
        assert len(completed(vapp)) == expected
        clock.advance(seconds=10)
    # Removing the limit: the queue claims on the plain path again.
    info = vapp.set_queue("jobs", rate_limit=None)
    assert (info.rate_limit, info.rate_period) == (None, None)


def test_queues_list_shows_depth_running_waiting_and_the_oldest_age(
    vapp: perdure.App, clock: perdure.VirtualClock, pg_url: str, schema: str
) -> None:
    vapp.set_queue("jobs", concurrency=4, partition_concurrency=1, rate_limit=(100, 60))
    ready = [vapp.start("echo", n) for n in range(3)]
    vapp.start("echo", "later", delay=3600)
    paused = vapp.start("echo", "paused")
    vapp.pause(paused.id)

    # The command line reads the server's clock: the virtual one started at
    # the real time, and has not moved yet.
    base = ["--database-url", pg_url, "--schema", schema, "queues"]
    table = CliRunner().invoke(cli, [*base, "list"])
    assert table.exit_code == 0, table.output
    line = next(x for x in table.output.splitlines() if x.startswith("jobs")).split()
    assert line[:9] == ["jobs", "4", "-", "1", "100/1m00s", "3", "0", "1", "1"]
    assert line[9].endswith("s"), line  # the oldest ready task's age: a few (milli)seconds
    listed = json.loads(CliRunner().invoke(cli, [*base, "list", "--json"]).output)
    assert listed[0]["ready"] == 3 and listed[0]["oldest_seconds"] >= 0

    clock.advance(seconds=90)
    vapp.start("echo", "new")
    (jobs,) = [q for q in vapp.queues() if q.name == "jobs"]
    assert (jobs.depth, jobs.running, jobs.waiting, jobs.paused) == (4, 0, 1, 1)
    assert jobs.oldest_seconds == pytest.approx(90)
    assert (jobs.concurrency, jobs.partition_concurrency, jobs.rate_limit) == (4, 1, 100)
    assert (jobs.rate_period, jobs.rate_per_key) == (60.0, False)

    testing.drain(vapp)
    for handle in ready:
        handle.result(timeout=5)
    (jobs,) = [q for q in vapp.queues() if q.name == "jobs"]
    assert (jobs.depth, jobs.running, jobs.waiting, jobs.oldest_seconds) == (0, 0, 1, None)


def test_queues_set_accepts_the_new_settings_from_the_command_line(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    base = ["--database-url", pg_url, "--schema", schema, "queues", "set", "mail"]
    runner = CliRunner()
    done = runner.invoke(
        cli, [*base, "--partition-concurrency", "2", "--rate-limit", "10/1m", "--rate-per-key"]
    )
    assert done.exit_code == 0, done.output
    assert "per key 2, rate 10/1m00s per key" in done.output
    (mail,) = [q for q in app.queues() if q.name == "mail"]
    assert (mail.partition_concurrency, mail.rate_limit, mail.rate_period) == (2, 10, 60.0)
    done = runner.invoke(cli, [*base, "--rate-limit", "none", "--rate-per-queue"])
    assert done.exit_code == 0 and "rate -" in done.output
    for bad in ("ten/1m", "0/1m", "10/0", "10/"):
        refused = runner.invoke(cli, [*base, "--rate-limit", bad])
        assert refused.exit_code == 2 and "neither N/PERIOD" in refused.output, bad


def test_a_retried_run_keeps_its_priority_and_partition_key(
    make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]
) -> None:
    app = make_app()

    @app.workflow("flaky")
    def flaky(ctx: perdure.SyncContext) -> None:
        raise perdure.PermanentError("no")

    handle = app.start("flaky", priority=7, partition_key="customer-7")
    testing.drain(app)
    assert app.get_run(handle.id).status == perdure.RunStatus.FAILED
    app.retry(handle.id)
    task = db.execute("SELECT priority, partition_key FROM tasks WHERE run_id = %s", (handle.id,))
    assert task.fetchall() == [(7, "customer-7")]


def test_the_tags_filter_uses_the_gin_index(
    vapp: perdure.App, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    vapp.start("echo", 0, tags={"customer": "7"})
    with sent_statements(monkeypatch) as sent:
        assert len(vapp.list_runs(tags={"customer": "7"})) == 1
    # The statement list_runs sent, explained with the parameters it sent.
    (listing,) = [s for s in sent if "tags" in s.query]
    db.execute("SET enable_seqscan = off")
    plan = db.execute(f"EXPLAIN {listing.query}", listing.params).fetchall()
    assert "runs_tags_idx" in " ".join(row[0] for row in plan)


def test_a_rate_limit_set_while_a_worker_claims_on_the_plain_path_holds_at_once(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    @app.workflow("echo", queue="jobs")
    def echo(ctx: perdure.SyncContext, value: Any) -> Any:
        return value

    with BackgroundWorker(app, concurrency=4, poll_seconds=0.05) as worker:
        assert app.start("echo", "warm").result(timeout=30) == "warm"
        # On the plain path: a claim goes through while the queue settings are locked.
        claimed_while_queue_settings_locked(pg_url, schema, lambda: app.start("echo", "plain"))
        app.set_queue("jobs", rate_limit=(1, 3600))
        handles = [app.start("echo", n) for n in range(3)]
        wait_until(
            lambda: sum(app.get_run(h.id).status == "completed" for h in handles) == 1,
            20,
            what="one run inside the new limit",
        )
        before = worker.count("worker_idle")
        wait_until(lambda: worker.count("worker_idle") >= before + 3, 20, what="more claims")
        assert sum(app.get_run(h.id).status == "completed" for h in handles) == 1
