"""The CLI's state-changing commands are recorded in the audit record; ``perdure audit list``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli


@pytest.fixture
def invoke(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run a ``perdure`` command on this test's schema."""

    def run(*args: str) -> Result:
        return CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, *args], catch_exceptions=False
        )

    return run


@pytest.fixture
def waiting(app: perdure.App) -> perdure.RunHandle:
    """A queued run of 'wait' (no worker runs it)."""

    @app.workflow("wait")
    async def wait(ctx: perdure.Context, secret: str) -> str:
        return str(await ctx.wait_for_signal("go"))

    app.register()
    return app.start("wait", "input-marker-7f3a")


def test_cli_actions_are_recorded_with_the_actor_and_outcome(
    app: perdure.App, invoke: Callable[..., Result], waiting: perdure.RunHandle
) -> None:
    sent = invoke("--as", "carol", "runs", "signal", waiting.id, "go", "--data", '"payload-7f3a"')
    assert sent.exit_code == 0, sent.output
    cancelled = invoke("--as", "carol", "runs", "cancel", waiting.id)
    assert cancelled.exit_code == 0, cancelled.output
    missing = invoke("--as", "carol", "runs", "cancel", "no-such-run")
    assert missing.exit_code != 0
    entries = app.audit_log(actor="carol")
    assert [(e.action, e.outcome, e.runs) for e in entries] == [
        ("cancel", "error", ["no-such-run"]),
        ("cancel", "ok", [waiting.id]),
        ("signal", "ok", [waiting.id]),
    ]
    assert all(e.source == "cli" and e.via == "cli" for e in entries)
    assert entries[0].detail is not None and "RunNotFound" in entries[0].detail["error"]
    assert entries[2].detail is not None and entries[2].detail["name"] == "go"
    # Never a payload or an input.
    assert "7f3a" not in json.dumps([e.detail for e in entries])


def test_without_as_the_os_user_is_the_actor(
    app: perdure.App, invoke: Callable[..., Result], waiting: perdure.RunHandle
) -> None:
    import getpass

    assert invoke("runs", "pause", waiting.id).exit_code == 0
    (entry,) = app.audit_log(action="pause")
    assert entry.actor == getpass.getuser() and entry.address


def test_dry_runs_and_reads_are_not_recorded(
    app: perdure.App, invoke: Callable[..., Result], waiting: perdure.RunHandle
) -> None:
    assert invoke("runs", "cancel", "--workflow", "wait", "--dry-run").exit_code == 0
    assert invoke("runs", "show", waiting.id).exit_code == 0
    assert app.audit_log() == []


def test_audit_list_filters_and_fits_80_columns(
    app: perdure.App, invoke: Callable[..., Result], waiting: perdure.RunHandle
) -> None:
    assert invoke("--as", "dave", "runs", "pause", waiting.id).exit_code == 0
    assert invoke("--as", "erin", "runs", "resume", waiting.id).exit_code == 0
    listed = invoke("audit", "list", "--actor", "dave", "--json")
    rows = json.loads(listed.output)
    assert [(r["actor"], r["action"]) for r in rows] == [("dave", "pause")]
    assert (
        json.loads(invoke("audit", "list", "--run", waiting.id, "--json").output)[0]["actor"]
        == "erin"
    )
    assert json.loads(
        invoke("audit", "list", "--since", "1h", "--action", "resume", "--json").output
    )
    table = CliRunner(env={"COLUMNS": "80"}).invoke(
        cli, ["--database-url", app.url, "--schema", app.schema, "audit", "list"]
    )
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert len(lines) == 3 and "erin" in lines[1] and "dave" in lines[2]
    assert max(len(line) for line in lines) <= 80


def test_migrate_with_a_grant_is_recorded(
    app: perdure.App, invoke: Callable[..., Result], pg_url: str
) -> None:
    import uuid

    import psycopg
    from psycopg import sql

    role = f"perdure_worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        done = invoke("--as", "deployer", "migrate", "--grant-to", role)
        assert done.exit_code == 0, done.output
        (entry,) = app.audit_log(action="migrate")
        assert entry.actor == "deployer" and entry.outcome == "ok"
        assert entry.detail is not None and role in entry.detail["roles"]
        printed = invoke("migrate", "--grant-to", role, "--print-grants")
        assert printed.exit_code == 0 and len(app.audit_log(action="migrate")) == 1
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_prune_is_recorded_and_deletes_old_audit_entries_as_the_owner(
    app: perdure.App, invoke: Callable[..., Result], pg_url: str
) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {app.schema}.audit (at, actor, via, source, action, outcome) "
            "VALUES (now() - interval '40 days', 'old', 'cli', 'cli', 'cancel', 'ok')"
        )
    done = invoke("--as", "janitor", "prune", "--finished-before", "30d", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["audit"] == 1
    assert [(e.actor, e.action) for e in app.audit_log()] == [("janitor", "prune")]
