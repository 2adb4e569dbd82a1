"""The command line as a newcomer meets it: starting runs by name, waiting for results,
``--json`` everywhere, options after the subcommand, tables at 80 columns, readable
failures and "did you mean" for misspelt names."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

import perdure
from helpers import WorkerProcess, wait_until
from perdure.cli.main import cli

LONG_NAME = "reconcile_the_quarterly_ledger_of_every_subsidiary"


def _refuse(items: list[int]) -> None:
    raise perdure.PermanentError(f"{len(items)} items is too many")


@pytest.fixture
def shop(app: perdure.App) -> perdure.App:
    """An App with a few workflows, registered in the database (no worker runs them)."""

    @app.workflow("greet")
    def greet(ctx: perdure.SyncContext, name: str) -> dict[str, str]:
        return {"greeting": f"hello {name}"}

    @app.workflow("approval")
    async def approval(ctx: perdure.Context, order: int) -> Any:
        return await ctx.wait_for_signal("approved", timeout=3600)

    @app.workflow(LONG_NAME)
    def ledger(ctx: perdure.SyncContext, items: list[int]) -> None:
        ctx.step("check", _refuse, items)

    app.register()
    return app


@pytest.fixture
def invoke(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run ``perdure ARGS`` on this test's database and schema (given after the command)."""

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(
            cli, [*args, "--database-url", pg_url, "--schema", schema], env=env
        )

    return run


@pytest.fixture
def worker(spawn_worker: Callable[..., WorkerProcess], app: perdure.App) -> Iterator[None]:
    """A worker process serving apps.cli_app (cli_greet, and cli_refuse that fails)."""
    process = spawn_worker("apps.cli_app:app", "--concurrency", "2")
    wait_until(
        lambda: {"cli_greet", "cli_refuse"} <= {w.name for w in app.workflows()},
        30,
        what=f"the worker to register its workflows:\n{process.output()}",
    )
    yield


# 1. runs start ------------------------------------------------------------------------


def test_runs_start_by_name_with_input_key_queue_and_delay(
    shop: perdure.App, invoke: Callable[..., Result], db: psycopg.Connection[Any]
) -> None:
    started = invoke(
        "runs", "start", "greet", '"ada"', "--key", "g-1", "--queue", "vip", "--delay", "600"
    )
    assert started.exit_code == 0, started.output
    run = shop.get_run("g-1")
    assert started.stdout.startswith(f"run {run.id} started")
    assert (run.workflow, run.version, run.input, run.queue) == ("greet", 1, "ada", "vip")
    due = db.execute(
        "SELECT available_at - now() > interval '500 seconds' FROM tasks WHERE run_id = %s",
        (run.id,),
    ).fetchone()
    assert due == (True,)
    # The same key again answers the same run.
    again = invoke("runs", "start", "greet", '"ada"', "--key", "g-1", "--json")
    assert json.loads(again.stdout) == {
        "id": run.id,
        "key": "g-1",
        "workflow": "greet",
        "version": 1,
        "queue": "vip",
        "created": False,
    }


def test_runs_start_reads_input_from_a_file(
    shop: perdure.App, invoke: Callable[..., Result], tmp_path: Path
) -> None:
    given = tmp_path / "input.json"
    given.write_text(json.dumps(list(range(50))))
    started = invoke("runs", "start", LONG_NAME, f"@{given}", "--json")
    assert started.exit_code == 0, started.output
    assert shop.get_run(json.loads(started.stdout)["id"]).input == list(range(50))
    bad = invoke("runs", "start", "greet", "ada")
    assert bad.exit_code == 2 and "not valid JSON" in bad.stderr
    assert "'\"ada\"'" in bad.stderr  # how to quote a string
    assert shop.list_runs(workflow="greet") == []


def test_runs_start_of_an_unknown_workflow_says_did_you_mean(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    refused = invoke("runs", "start", "gret", '"ada"')
    assert refused.exit_code == 1
    assert refused.stderr.strip() == (
        "Error: UnknownWorkflow: no workflow 'gret' is registered; did you mean 'greet'?"
    )
    assert shop.list_runs() == []


def test_runs_start_wait_prints_the_result_and_fails_with_the_run(
    worker: None, app: perdure.App, invoke: Callable[..., Result]
) -> None:
    done = invoke("runs", "start", "cli_greet", '{"name": "ada"}', "--wait", "--timeout", "30")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"greeting": "hello ADA"}
    failed = invoke("runs", "start", "cli_refuse", '{"name": "bob"}', "--wait", "--json")
    assert failed.exit_code == 1, failed.output
    document = json.loads(failed.stdout)
    assert document["status"] == "failed" and "bob is not welcome" in document["error"]["message"]
    assert failed.stderr == ""


# 2. runs result -----------------------------------------------------------------------


def test_runs_result_waits_or_says_the_run_is_not_finished(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    shop.start("approval", 1, key="order-1")
    pending = invoke("runs", "result", "order-1")
    assert pending.exit_code == 4
    assert "has not finished yet (it is queued)" in pending.stderr and pending.stdout == ""
    timed_out = invoke("runs", "result", "order-1", "--wait", "--timeout", "0.3", "--json")
    assert timed_out.exit_code == 4
    assert json.loads(timed_out.stdout)["status"] == "queued"
    # Once it has finished, its output.
    handle = shop.start("greet", "eve", key="greet-eve")
    shop.run_until_complete(handle)
    shown = invoke("runs", "result", "greet-eve", "--wait", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {
        "id": handle.id,
        "status": "completed",
        "output": {"greeting": "hello eve"},
    }


# 3. --json everywhere -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "list"),
        ("runs", "show", "order-1"),
        ("runs", "signal", "order-1", "approved", "--data", "true"),
        ("runs", "pause", "order-1"),
        ("runs", "cancel", "order-1"),
        ("runs", "start", "greet", '"ada"'),
        ("runs", "result", "order-1"),
        ("queues", "list"),
        ("queues", "set", "greet", "--concurrency", "3"),
        ("schedules", "list"),
        ("workflows", "list"),
        ("workflows", "show", "greet"),
        ("migrate",),
        ("prune", "--finished-before", "30d", "--dry-run"),
        ("embedded", "status"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
@pytest.mark.parametrize("where", ["after", "global"])
def test_every_printing_command_takes_json_and_prints_only_json(
    shop: perdure.App,
    pg_url: str,
    schema: str,
    command: tuple[str, ...],
    where: str,
    tmp_path: Path,
) -> None:
    shop.start("approval", 1, key="order-1")
    args = [*command, "--json"] if where == "after" else ["--json", *command]
    done = CliRunner().invoke(
        cli,
        ["--database-url", pg_url, "--schema", schema, *args],
        env={"PERDURE_EMBEDDED_DIR": str(tmp_path / "pg")},
    )
    assert done.exit_code in (0, 4), done.output  # 4: runs result of an unfinished run
    json.loads(done.stdout)
    assert done.stderr == ""


def test_runs_list_json_carries_the_next_pages_cursor(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    for n in range(3):
        shop.start("approval", n)
    first = json.loads(invoke("runs", "list", "--limit", "2", "--json").stdout)
    assert len(first["runs"]) == 2 and first["next_cursor"]
    rest = invoke("runs", "list", "--limit", "2", "--cursor", first["next_cursor"], "--json")
    assert rest.stderr == ""
    page = json.loads(rest.stdout)
    assert len(page["runs"]) == 1 and page["next_cursor"] is None


# 4. global options after the subcommand --------------------------------------------------


def test_global_options_are_accepted_after_the_subcommand(
    shop: perdure.App, pg_url: str, schema: str
) -> None:
    shop.start("approval", 1, key="order-1")
    runner = CliRunner()
    after = runner.invoke(
        cli, ["runs", "list", "--database-url", pg_url, f"--schema={schema}", "--json"]
    )
    assert after.exit_code == 0, after.output
    assert [r["key"] for r in json.loads(after.stdout)["runs"]] == ["order-1"]
    # A command's own option of the same name stays the command's: the dashboard's.
    from perdure.cli.main import cli as group
    from perdure.cli.options import hoist

    ctx = group.make_context("perdure", ["--help"], resilient_parsing=True)
    assert hoist(group, ctx, ["dashboard", "--schema", "x", "--json"]) == [
        "--json",
        "dashboard",
        "--schema",
        "x",
    ]
    assert hoist(group, ctx, ["runs", "signal", "k", "go", "--", "--schema"])[-1] == "--schema"


# 5. tables at 80 columns ----------------------------------------------------------------


def test_tables_fit_80_columns_and_cut_names_with_an_ellipsis(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    shop.start(LONG_NAME, [1], key="ledger-1")
    shop.start("greet", "ada", key="greet-1")
    for command in (("runs", "list"), ("workflows", "list"), ("queues", "list")):
        shown = invoke(*command, env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.output
        lines = shown.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), shown.stdout
        # The long name is on one line, cut: never folded two letters a line.
        assert any(LONG_NAME[:6] in line and "…" in line for line in lines), shown.stdout
        assert not any(line.strip() in {"re", "co", "nc"} for line in lines), shown.stdout


# 6. runs show of a failed run ------------------------------------------------------------


def test_runs_show_of_a_failed_run_shows_the_error_once_with_the_users_frames(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    handle = shop.start(LONG_NAME, list(range(50)), key="ledger-50")
    with pytest.raises(perdure.RunFailed):
        shop.run_until_complete(handle)
    shown = invoke("runs", "show", "ledger-50", env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert out.count("failed after") == 1, out  # the error's line, once
    assert "in _refuse" in out and "50 items is too many" in out  # the user's frame first
    assert "perdure/engine" not in out and "frame(s) of perdure" in out
    assert "… 50 items, --full to see all" in out
    assert "    49\n" not in out
    full = invoke("runs", "show", "ledger-50", "--traceback", "--full", env={"COLUMNS": "120"})
    assert "perdure/engine" in full.stdout and "  49" in full.stdout
    assert "--full to see all" not in full.stdout


# 7. did you mean ------------------------------------------------------------------------


def test_a_signal_the_run_does_not_wait_for_warns_with_the_name_it_waits_for(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    handle = shop.start("approval", 20, key="shop:20")
    worker = shop.worker(concurrency=1, poll_seconds=0.05)
    import asyncio

    async def until_waiting() -> None:
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(400):
                if (await handle.status_async()) == "waiting":
                    return
                await asyncio.sleep(0.05)
        finally:
            worker.request_stop()
            await task

    asyncio.run(until_waiting())
    sent = invoke("runs", "signal", "shop:20", "aproved")
    assert sent.exit_code == 0, sent.output
    assert "waits for signal 'approved', not 'aproved'; did you mean 'approved'?" in sent.stderr
    right = invoke("runs", "signal", "shop:20", "approved")
    assert right.exit_code == 0 and right.stderr == ""


def test_misspelt_workflow_queue_and_schedule_names_say_did_you_mean(
    shop: perdure.App, invoke: Callable[..., Result]
) -> None:
    shop.add_schedule("nightly", "0 3 * * *", workflow="greet", input="night")
    listed = invoke("runs", "list", "--workflow", "aproval")
    assert "no workflow named 'aproval' is registered; did you mean 'approval'?" in listed.stderr
    queued = invoke("runs", "list", "--queue", "gret")
    assert "no queue named 'gret'; did you mean 'greet'?" in queued.stderr
    shown = invoke("workflows", "show", "gret")
    assert shown.exit_code == 1 and "did you mean 'greet'?" in shown.stderr
    paused = invoke("schedules", "pause", "nightl")
    assert paused.exit_code == 1
    assert "no schedule named 'nightl'; did you mean 'nightly'?" in paused.stderr
    assert not shop.get_schedule("nightly").paused
