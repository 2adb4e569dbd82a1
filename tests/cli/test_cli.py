"""The ``perdure`` command line against a real PostgreSQL: migrate, runs, workflows, worker."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

import perdure
from helpers import WorkerProcess, wait_until
from perdure.cli.main import cli
from perdure.cli.render import format_duration, safe_url
from perdure.cli.runs import parse_since
from perdure.store import embedded, migrate
from perdure.store.store import execute_sync


@pytest.fixture
def invoke(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run a ``perdure`` command on this test's database and schema."""

    def run(*args: str) -> Result:
        runner = CliRunner()
        return runner.invoke(
            cli, ["--database-url", pg_url, "--schema", schema, *args], catch_exceptions=False
        )

    return run


def drain(app: perdure.App, handles: list[perdure.RunHandle], timeout: float = 20) -> None:
    """Execute ``handles`` with an in-process worker until each has finished."""
    worker = app.worker(concurrency=4, poll_seconds=0.05, lease_seconds=5)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            for handle in handles:
                try:
                    await handle.result_async(timeout=timeout)
                except perdure.PerdureError:
                    pass
        finally:
            worker.request_stop()
            await task

    asyncio.run(main())


def _refuse(order: int) -> None:
    raise perdure.PermanentError(f"order {order} is refused")


@pytest.fixture
def runs(app: perdure.App) -> dict[str, perdure.RunHandle]:
    """One completed run (key ``ok-1``) and one failed run (key ``bad-1``)."""

    @app.workflow("checkout")
    async def checkout(ctx: perdure.Context, order: int) -> dict[str, int]:
        hold = await ctx.step("reserve", lambda: order * 2)
        cents = await ctx.step("charge", lambda: hold + 1)
        return {"cents": cents}

    @app.workflow("refund", version=3)
    async def refund(ctx: perdure.Context, order: int) -> None:
        await ctx.step("check", lambda: order)
        await ctx.step("refuse", _refuse, order)

    done = app.start("checkout", 5, key="ok-1")
    failed = app.start("refund", 9, key="bad-1")
    drain(app, [done, failed])
    assert done.status() == perdure.RunStatus.COMPLETED
    assert failed.status() == perdure.RunStatus.FAILED
    return {"done": done, "failed": failed}


@pytest.fixture
def fresh_cli_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Import ``apps.cli_app`` anew for this test: its App is configured once per import."""
    monkeypatch.delitem(sys.modules, "apps.cli_app", raising=False)
    yield
    module = sys.modules.get("apps.cli_app")
    if module is not None:
        module.app.close()


def test_migrate_applies_then_says_up_to_date(invoke: Callable[..., Result], schema: str) -> None:
    first = invoke("migrate")
    assert first.exit_code == 0, first.output
    assert f"schema {schema}: applied migration 0001_initial" in first.output
    second = invoke("migrate")
    assert second.exit_code == 0, second.output
    latest = migrate.latest(migrate.available())
    assert f"schema {schema} is up to date (version {latest})" in second.output


def test_runs_list_shows_a_table_and_json_filters_by_status(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    table = invoke("runs", "list")
    assert table.exit_code == 0, table.output
    assert runs["done"].id in table.output and runs["failed"].id in table.output
    assert "checkout@1" in table.output and "refund@3" in table.output
    assert "completed" in table.output and "failed" in table.output

    result = invoke("runs", "list", "--status", "failed", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)["runs"]
    assert [r["id"] for r in listed] == [runs["failed"].id]
    assert listed[0]["status"] == "failed" and listed[0]["key"] == "bad-1"
    assert datetime.fromisoformat(listed[0]["created_at"]).tzinfo is not None
    assert listed[0]["steps_completed"] == 1

    by_workflow = json.loads(invoke("runs", "list", "--workflow", "checkout", "--json").output)
    assert [r["id"] for r in by_workflow["runs"]] == [runs["done"].id]
    assert len(json.loads(invoke("runs", "list", "--since", "1h", "--json").output)["runs"]) == 2
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    page = json.loads(invoke("runs", "list", "--since", future, "--json").output)
    assert page == {"runs": [], "next_cursor": None}
    assert "no runs match" in invoke("runs", "list", "--status", "queued").output


def test_runs_list_keeps_ids_whole_at_100_columns(
    pg_url: str, schema: str, runs: dict[str, perdure.RunHandle]
) -> None:
    result = CliRunner().invoke(
        cli,
        ["--database-url", pg_url, "--schema", schema, "runs", "list"],
        env={"COLUMNS": "100"},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100
    assert runs["done"].id in result.output and "checkout@1" in result.output
    assert "bad-1" in result.output


def test_runs_list_refuses_a_bad_since(invoke: Callable[..., Result]) -> None:
    result = invoke("runs", "list", "--since", "yesterday")
    assert result.exit_code == 2
    assert "neither a duration" in result.output


def test_runs_show_a_completed_run(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    result = invoke("runs", "show", "ok-1")
    assert result.exit_code == 0, result.output
    out = result.output
    assert runs["done"].id in out
    assert "checkout (version 1)" in out
    assert "completed" in out and '"cents": 11' in out
    assert "reserve" in out and "charge" in out
    assert "history" not in out


def test_runs_show_a_failed_run_prints_the_error_and_its_traceback(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    result = invoke("runs", "show", runs["failed"].id)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "PermanentError" in out
    assert "order 9 is refused" in out
    assert "Traceback (most recent call last)" in out
    assert "_refuse" in out  # the frame that raised, from the recorded traceback
    assert "refund (version 3)" in out


def test_runs_show_history_as_json(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    result = invoke("runs", "show", "ok-1", "--history", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["run"]["id"] == runs["done"].id
    assert document["run"]["output"] == {"cents": 11}
    assert [s["name"] for s in document["steps"]] == ["reserve", "charge"]
    events = [e["event"] for e in document["history"]]
    assert events[0] == "run_created" and events[-1] == "run_completed"
    plain = json.loads(invoke("runs", "show", "ok-1", "--json").output)
    assert set(plain) == {"run", "steps", "children"}


def test_runs_show_history_table(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    result = invoke("runs", "show", "bad-1", "--history")
    assert result.exit_code == 0, result.output
    assert "history" in result.output
    assert "run_created" in result.output and "run_failed" in result.output


def test_runs_retry_queues_a_failed_run_and_refuses_a_completed_one(
    invoke: Callable[..., Result], app: perdure.App, runs: dict[str, perdure.RunHandle]
) -> None:
    failed = runs["failed"].id
    result = invoke("runs", "retry", failed)
    assert result.exit_code == 0, result.output
    assert f"run {failed} queued again; it resumes at its failed step" in result.output
    assert app.get_run(failed).status == perdure.RunStatus.QUEUED

    refused = invoke("runs", "retry", "ok-1")
    assert refused.exit_code == 1
    assert refused.output.startswith("Error:")
    assert "completed" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_runs_cancel_a_queued_run_twice(invoke: Callable[..., Result], app: perdure.App) -> None:
    @app.workflow("idle")
    async def idle(ctx: perdure.Context) -> None:
        await ctx.step("never", lambda: None)

    handle = app.start("idle", key="idle-1")  # no worker serves it: it stays queued
    result = invoke("runs", "cancel", "idle-1", "--reason", "not needed")
    assert result.exit_code == 0, result.output
    assert f"run {handle.id} is cancelled" in result.output
    assert app.get_run(handle.id).status == perdure.RunStatus.CANCELLED
    again = invoke("runs", "cancel", handle.id)
    assert again.exit_code == 0, again.output
    assert "is cancelled" in again.output


def test_runs_cancel_of_a_finished_run_is_an_error(
    invoke: Callable[..., Result], runs: dict[str, perdure.RunHandle]
) -> None:
    result = invoke("runs", "cancel", "ok-1")
    assert result.exit_code == 1
    assert result.output.startswith("Error:") and "completed" in result.output


def test_runs_show_of_an_unknown_run_fails_with_one_line(
    invoke: Callable[..., Result], app: perdure.App
) -> None:
    app.ensure_schema()
    for ref in ("no-such-key", "0190b6a4-0000-7000-8000-000000000000"):
        result = invoke("runs", "show", ref)
        assert result.exit_code == 1
        assert result.output.startswith("Error:") and ref in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_workflows_list_after_migrate_with_an_app(
    invoke: Callable[..., Result], fresh_cli_app: None
) -> None:
    # A read never creates the schema: before `perdure migrate` there is none.
    missing = invoke("workflows", "list")
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert invoke("migrate").exit_code == 0
    empty = invoke("workflows", "list")
    assert empty.exit_code == 0, empty.output
    assert "no workflow is registered" in empty.output

    registered = invoke("migrate", "--app", "apps.cli_app:app")
    assert registered.exit_code == 0, registered.output
    assert "cli_greet@1" in registered.output and "cli_refuse@2" in registered.output

    table = invoke("workflows", "list")
    assert table.exit_code == 0, table.output
    assert "cli_greet" in table.output and "cli_other" in table.output
    listed = json.loads(invoke("workflows", "list", "--json").output)
    assert {(w["name"], w["version"], w["queue"]) for w in listed} == {
        ("cli_greet", 1, "cli_greet"),
        ("cli_refuse", 2, "cli_other"),
    }


def test_workflows_list_counts_runs_by_status(
    invoke: Callable[..., Result], app: perdure.App, runs: dict[str, perdure.RunHandle]
) -> None:
    listed = {w["name"]: w for w in json.loads(invoke("workflows", "list", "--json").output)}
    assert listed["checkout"]["counts"] == {"completed": 1}
    assert listed["refund"]["counts"] == {"failed": 1}
    table = invoke("workflows", "list").output
    assert "1 completed" in table and "1 failed" in table


def test_workflows_list_counts_at_most_the_newest_runs_of_each_workflow(
    invoke: Callable[..., Result], make_app: Callable[..., Any], db: Any
) -> None:
    app = make_app()

    @app.workflow("many")
    def many(ctx: perdure.SyncContext) -> None:
        return None

    app.register()
    for _ in range(5):
        app.start("many")
    (whole,) = execute_sync(db, app.statements.workflows.list(cap=10))
    (capped,) = execute_sync(db, app.statements.workflows.list(cap=3))
    assert (whole.counts, whole.counts_capped) == ({"queued": 5}, False)
    assert (capped.counts, capped.counts_capped) == ({"queued": 3}, True)
    assert "newest 10,000 runs" not in invoke("workflows", "list").output


def test_an_app_that_cannot_be_imported_is_a_usage_error(invoke: Callable[..., Result]) -> None:
    result = invoke("worker", "apps.no_such_module:app")
    assert result.exit_code == 2
    assert "cannot import" in result.output


def test_a_worker_process_runs_work_and_stops_on_sigterm(
    spawn_worker: Callable[..., WorkerProcess], make_app: Callable[..., Any], schema: str
) -> None:
    client = make_app()
    worker = spawn_worker("apps.cli_app:app", "--concurrency", "2", "--lease-seconds", "5")

    # The worker creates the schema and registers its workflows when it starts (the
    # client's reads never create it); the client starts runs by name.
    def registered() -> bool:
        try:
            return any(w.name == "cli_greet" for w in client.workflows())
        except perdure.SchemaError:
            return False

    wait_until(
        registered,
        timeout=30,
        what=f"the worker to register its workflows; output:\n{worker.output()}",
    )
    handle = client.start("cli_greet", {"name": "ada"})
    assert handle.result(timeout=30) == {"greeting": "hello ADA"}
    assert client.get_run(handle.id).worker_id is not None

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0, worker.output()
    output = worker.output()
    assert "cli_greet@1" in output and f"schema {schema}" in output
    assert all(w.status != "running" for w in client.workers())


def test_embedded_status_says_where_the_data_would_live(
    invoke: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PERDURE_EMBEDDED_DIR", str(tmp_path / "pg"))
    result = invoke("embedded", "status")
    assert result.exit_code == 0, result.output
    assert f"data dir: {tmp_path / 'pg'} (not created yet)" in result.output
    assert "running:  no" in result.output
    assert f"rm -rf {tmp_path / 'pg'}" in result.output
    assert "--database-url" in result.output  # this test passes one: the note says so


def test_embedded_start_and_stop_a_server_in_the_given_data_dir(
    invoke: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = Path(tempfile.mkdtemp(prefix="perdure-embedded-cli-", dir="/tmp"))
    base.chmod(0o755)  # the server's own account must reach its data dir
    data_dir = base / "pg"
    monkeypatch.setenv("PERDURE_EMBEDDED_DIR", str(data_dir))
    try:
        started = invoke("embedded", "start")
        assert started.exit_code == 0, started.output
        assert f"created a PostgreSQL cluster in {data_dir}" in started.output
        # The URL is stdout's only line, for scripts; the rest is on stderr.
        assert "started" in started.stderr
        url = re.fullmatch(r"(postgresql://\S+)\n", started.stdout)
        assert url is not None, started.output
        with psycopg.connect(url.group(1)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        again = invoke("embedded", "start")
        assert again.exit_code == 0 and "already running" in again.stderr
        assert again.stdout == f"{url.group(1)}\n"
        described = invoke("embedded", "start", "--json")
        assert described.stderr == ""
        assert json.loads(described.stdout)["url"] == url.group(1)
        assert json.loads(described.stdout)["started"] is False
        status = invoke("embedded", "status")
        assert "running:  yes" in status.output and url.group(1) in status.output

        stopped = invoke("embedded", "stop")
        assert stopped.exit_code == 0 and f"stopped PostgreSQL in {data_dir}" in stopped.output
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url.group(1), connect_timeout=5).close()
        twice = invoke("embedded", "stop")
        assert twice.exit_code == 0 and "is not running" in twice.output
        assert "running:  no" in invoke("embedded", "status").output
    finally:
        embedded.stop_server(data_dir)
        shutil.rmtree(base, ignore_errors=True)


def test_parse_since_and_formatting() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2024-05-01T10:00:00") == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert parse_since("2024-05-01T10:00:00+02:00") == datetime(2024, 5, 1, 8, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_since("soon")
    assert format_duration(0.25) == "250ms"
    assert format_duration(1.23) == "1.2s"
    assert format_duration(184) == "3m04s"
    assert format_duration(2 * 3600 + 300) == "2h05m"
    assert format_duration(None) == "-"
    assert safe_url("postgresql://u:secret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert "secret" not in safe_url("host=db password=secret dbname=x")


def test_runs_logs_shows_each_attempts_records(
    app: perdure.App, invoke: Callable[..., Result]
) -> None:
    import logging

    steplog = logging.getLogger("cli.steps")
    steplog.setLevel(logging.INFO)
    tries = {"n": 0}

    def charge() -> str:
        tries["n"] += 1
        steplog.info("try %s", tries["n"])
        if tries["n"] == 1:
            raise RuntimeError("declined")
        return "ok"

    @app.workflow("logged")
    async def logged(ctx: perdure.Context, _: Any) -> str:
        await ctx.step("quiet", lambda: 1)
        return await ctx.step(
            "charge", charge, retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0)
        )

    run = app.start("logged", None, key="logged-1")
    drain(app, [run])
    shown = invoke("runs", "logs", "logged-1")
    assert shown.exit_code == 0, shown.output
    assert "step charge · attempt 1 · retrying" in shown.output
    assert "step charge · attempt 2 · completed" in shown.output
    assert "cli.steps: try 1" in shown.output and "cli.steps: try 2" in shown.output
    as_json = json.loads(invoke("runs", "logs", run.id, "--step", "charge", "--json").output)
    assert as_json["run_id"] == run.id
    assert [(a["attempt"], [r["message"] for r in a["records"]]) for a in as_json["attempts"]] == [
        (1, ["try 1"]),
        (2, ["try 2"]),
    ]
    none = invoke("runs", "logs", run.id, "--step", "quiet")
    assert none.exit_code == 0 and "no log records for step 'quiet'" in none.output
