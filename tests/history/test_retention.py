"""Retention: prune or archive old finished runs in batches while a worker works.

Old runs are made by an App whose virtual clock stands 42 days in the past,
with history partitions for those days; then a real ``perdure worker``
process runs new work while the old runs are pruned, and the test checks
that only the old finished runs went, with their steps, signals and history
partitions, and that every live run (and a parent or child of one) stayed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import perdure
from apps.retention_app import define
from helpers import WorkerProcess, wait_until
from perdure.cli.main import cli
from perdure.testing import drain

OLD_DAYS = 42


@dataclass
class OldRuns:
    """The runs made in the past, by what retention must do with them."""

    prunable: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    signalled: str = ""
    history: dict[str, list[perdure.HistoryEvent]] = field(default_factory=dict)
    steps: dict[str, list[perdure.Step]] = field(default_factory=dict)


def make_old_runs(make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]) -> OldRuns:
    """Runs finished (or not) 42 days ago, their history in day partitions of that time."""
    db.execute("SELECT history_partitions_ensure(now() - interval '45 days', 5)")
    clock = perdure.VirtualClock(datetime.now(UTC) - timedelta(days=OLD_DAYS))
    old = make_app(clock=clock)
    define(old)
    made = OldRuns()
    made.prunable += [old.start("work", i, key=f"old:work:{i}").id for i in range(10)]
    made.prunable += [old.start("refused", i, key=f"old:refused:{i}").id for i in range(2)]
    signalled = old.start("waiter", 1, key="old:signalled")
    live_waiter = old.start("waiter", 2, key="old:waiting")
    leaves = old.start("parent_leaves", 3, key="old:parent_leaves")
    stays = old.start("parent_stays", 4, key="old:parent_stays")
    drain(old)
    old.signal(signalled.id, "go", {"ok": True}, key="go-1")
    drain(old)
    assert signalled.result(timeout=10) == {"ok": True}
    made.signalled = signalled.id
    made.prunable.append(signalled.id)
    # Live: a waiting run; a completed parent whose child still waits (and
    # that child); a waiting parent whose child completed (and that child).
    child_waiting = old.get_run(leaves.id).output
    child_done = [r.id for r in old.list_runs(parent=stays.id)]
    made.kept = [live_waiter.id, leaves.id, child_waiting, stays.id, *child_done]
    assert old.get_run(leaves.id).status == perdure.RunStatus.COMPLETED
    assert old.get_run(child_waiting).status == perdure.RunStatus.WAITING
    assert old.get_run(stays.id).status == perdure.RunStatus.WAITING
    assert [old.get_run(c).status for c in child_done] == [perdure.RunStatus.COMPLETED]
    for run_id in made.prunable + made.kept:
        made.history[run_id] = old.history(run_id)
        made.steps[run_id] = old.steps(run_id)
    return made


@pytest.fixture
def old(
    app: perdure.App, make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]
) -> OldRuns:
    """The schema migrated (by ``app``) and the old runs made."""
    app.ensure_schema()
    return make_old_runs(make_app, db)


def old_partitions(db: psycopg.Connection[Any], before: datetime) -> list[str]:
    rows = db.execute(
        "SELECT name FROM history_partitions() WHERE NOT is_default AND to_at <= %s", (before,)
    ).fetchall()
    return [r[0] for r in rows]


def count(db: psycopg.Connection[Any], table: str, run_ids: list[str]) -> int:
    row = db.execute(f"SELECT count(*) FROM {table} WHERE run_id = ANY(%s::uuid[])", (run_ids,))
    return int(row.fetchone()[0])  # type: ignore[index]


@pytest.mark.parametrize("archive", [False, True], ids=["delete", "archive"])
def test_prune_in_batches_while_a_worker_works_touches_no_live_run(
    app: perdure.App,
    old: OldRuns,
    db: psycopg.Connection[Any],
    spawn_worker: Callable[..., WorkerProcess],
    pg_url: str,
    schema: str,
    archive: bool,
) -> None:
    cutoff = datetime.now(UTC) - timedelta(days=30)
    doomed_partitions = old_partitions(db, cutoff)
    assert len(doomed_partitions) == 6
    assert count(db, "history", old.prunable) > 0

    worker = spawn_worker("apps.retention_app:app", "--concurrency", "4")
    new = [app.start("work", i) for i in range(40)]
    wait_until(
        lambda: app.list_runs(status="completed", workflow="work", since=cutoff),
        what="the worker's first run",
    )
    busy = [
        r for r in app.list_runs(workflow="work", since=cutoff, limit=100) if not r.status.is_final
    ]
    assert busy, "the worker finished everything before the prune started"

    result = app.prune(timedelta(days=30), archive=archive, batch_size=4)

    # Old finished runs went, in batches of at most 4 (one statement each).
    assert result.runs == len(old.prunable) == 13
    assert result.batches == 4
    assert result.archived is archive and not result.dry_run
    # Whole day partitions were dropped, not rows.
    assert result.partitions == doomed_partitions and old_partitions(db, cutoff) == []
    for table in ("steps", "signals", "tasks", "history"):
        assert count(db, table, old.prunable) == 0, table
    # Live runs, a parent whose child is live and a child whose parent is
    # live are untouched, and keep their whole history (moved out of the
    # dropped partitions into the default one).
    for run_id in old.kept:
        run = app.get_run(run_id)
        assert not run.archived
        assert app.history(run_id) == old.history[run_id], run.workflow
        assert app.steps(run_id) == old.steps[run_id]
    # The worker's runs all completed, none pruned.
    assert [h.result(timeout=60) for h in new] == [8 * i for i in range(40)]
    assert "Traceback" not in worker.output()

    if archive:
        for run_id in old.prunable:
            run = app.get_run(run_id)
            assert run.archived and run.status.is_final
            assert app.history(run_id) == old.history[run_id]
            assert app.steps(run_id) == old.steps[run_id]
        assert count(db, "archive_signals", [old.signalled]) == 1
        listed = app.list_runs(archived=True, limit=100)
        assert sorted(r.id for r in listed) == sorted(old.prunable)
        assert all(r.archived for r in listed)
        refused = app.list_runs(archived=True, workflow="refused", status="failed")
        assert len(refused) == 2 and refused[0].steps_completed == 0
        shown = CliRunner().invoke(
            cli,
            [
                "--database-url",
                pg_url,
                "--schema",
                schema,
                "runs",
                "show",
                "old:work:3",
                "--history",
            ],
        )
        assert shown.exit_code == 0, shown.output
        assert "archived" in shown.stdout and "run_completed" in shown.stdout
        assert (
            "old:work:3"
            in CliRunner()
            .invoke(
                cli, ["--database-url", pg_url, "--schema", schema, "runs", "list", "--archived"]
            )
            .stdout
        )
    else:
        for run_id in old.prunable:
            with pytest.raises(perdure.RunNotFound):
                app.get_run(run_id)
        assert app.list_runs(archived=True) == []


def test_a_dry_run_counts_and_changes_nothing(
    app: perdure.App, old: OldRuns, db: psycopg.Connection[Any]
) -> None:
    cutoff = datetime.now(UTC) - timedelta(days=30)
    partitions = old_partitions(db, cutoff)
    result = app.prune(timedelta(days=30), dry_run=True)
    assert (result.runs, result.batches, result.dry_run) == (13, 0, True)
    assert result.partitions == partitions == old_partitions(db, cutoff)
    assert all(app.get_run(r) for r in old.prunable)
    # A cutoff before the old runs finished takes nothing.
    early = datetime.now(UTC) - timedelta(days=OLD_DAYS + 1)
    assert app.prune(early).runs == 0
    assert len(app.list_runs(limit=100)) == len(old.prunable) + len(old.kept)


def test_one_maintainer_at_a_time(app: perdure.App, pg_url: str, schema: str) -> None:
    app.ensure_schema()
    with psycopg.connect(pg_url, autocommit=True) as other:
        (taken,) = other.execute(
            "SELECT pg_try_advisory_lock(hashtext('perdure.maintenance:' || %s))", (schema,)
        ).fetchone()  # type: ignore[misc]
        assert taken
        with pytest.raises(perdure.MaintenanceBusy):
            app.prune(timedelta(days=30))
        # Unlock explicitly: closing the connection would release the lock only
        # once the server has noticed, which may be after the next line.
        other.execute(
            "SELECT pg_advisory_unlock(hashtext('perdure.maintenance:' || %s))", (schema,)
        )
    assert app.prune(timedelta(days=30)).runs == 0


def test_a_worker_prunes_by_itself_with_prune_after(
    app: perdure.App,
    old: OldRuns,
    db: psycopg.Connection[Any],
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    # Two workers: whichever takes the maintenance lock archives, once.
    workers = [
        spawn_worker("apps.retention_app:app", "--prune-after", "30d", "--prune-archive")
        for _ in range(2)
    ]
    wait_until(
        lambda: len(app.list_runs(archived=True, limit=100)) == len(old.prunable),
        timeout=60,
        what="the workers' maintenance pass",
    )
    wait_until(
        lambda: old_partitions(db, datetime.now(UTC) - timedelta(days=30)) == [],
        what="old partitions dropped",
    )
    assert all(not app.get_run(r).archived for r in old.kept)
    # Partitions are made ahead: today and the next three days.
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    covered = db.execute(
        "SELECT count(*) FROM history_partitions() WHERE from_at >= %s AND to_at <= %s",
        (today, today + timedelta(days=4)),
    ).fetchone()
    assert covered == (4,)
    logs = "".join(w.output() for w in workers)
    assert logs.count(f"archived {len(old.prunable)} run(s)") == 1, logs


def test_new_partitions_take_their_rows_from_the_default_partition(
    make_app: Callable[..., perdure.App], db: psycopg.Connection[Any]
) -> None:
    # A run written 10 days ahead: no partition covers that day yet.
    ahead = make_app(clock=perdure.VirtualClock(datetime.now(UTC) + timedelta(days=10)))
    define(ahead)
    run = ahead.start("work", 1)
    where = "SELECT DISTINCT tableoid::regclass::text FROM history WHERE run_id = %s"
    assert db.execute(where, (run.id,)).fetchall() == [("history_default",)]
    (made,) = db.execute(
        "SELECT history_partitions_ensure(now() + interval '10 days', 0)"
    ).fetchone()  # type: ignore[misc]
    assert made == 1
    (moved,) = db.execute(where, (run.id,)).fetchall()
    assert moved[0].startswith("history_p")
    assert [e.event for e in ahead.history(run.id)] == ["run_created"]
    # Asking again creates nothing.
    assert db.execute(
        "SELECT history_partitions_ensure(now() + interval '10 days', 0)"
    ).fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"finished_before": "30d"}, "finished_before must be a positive number"),
        ({"finished_before": datetime(2020, 1, 1)}, "timezone-aware"),
        ({"finished_before": 60, "batch_size": 0}, "batch_size must be an integer"),
        ({"finished_before": 60, "archive": "yes"}, "archive must be True or False"),
    ],
)
def test_bad_prune_arguments_are_refused(
    app: perdure.App, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):
        app.prune(**args)


def test_the_prune_command(old: OldRuns, pg_url: str, schema: str) -> None:

    def prune(*args: str) -> str:
        result = CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, "prune", *args]
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    dry = prune("--finished-before", "30d", "--dry-run")
    assert "would have deleted 13 run(s)" in dry and "history_p" in dry
    done = prune("--finished-before", "30d", "--batch-size", "5")
    assert "deleted 13 run(s)" in done and "in 3 batch(es)" in done
    again = prune("--finished-before", (datetime.now(UTC) - timedelta(days=30)).isoformat())
    assert "deleted 0 run(s)" in again and "dropped: none" in again
    bad = CliRunner().invoke(
        cli, ["--database-url", pg_url, "--schema", schema, "prune", "--finished-before", "soon"]
    )
    assert bad.exit_code == 2 and "neither a duration" in bad.output


def test_the_prune_command_archives(
    old: OldRuns, app: perdure.App, db: psycopg.Connection[Any], pg_url: str, schema: str
) -> None:
    base = ["--database-url", pg_url, "--schema", schema, "prune", "--finished-before", "30d"]
    done = CliRunner().invoke(cli, [*base, "--archive", "--json"])
    assert done.exit_code == 0, done.output
    outcome = json.loads(done.stdout)
    assert outcome["archived"] is True and outcome["runs"] == 13, outcome
    archived = app.list_runs(archived=True, limit=100)
    assert len(archived) == 13 and all(run.archived for run in archived)
    assert db.execute("SELECT count(*) FROM archive_runs").fetchone() == (13,)
