"""``perdure demo``: end to end, with real worker processes and a real SIGKILL."""

from __future__ import annotations

import psycopg
from click.testing import CliRunner
from psycopg import sql

from perdure.cli.main import cli


def test_demo_survives_a_killed_worker(pg_url: str, schema: str) -> None:
    """The demo kills a worker mid-flight, every run completes and every invariant holds."""
    args = ["--database-url", pg_url, "--schema", schema, "demo", "--runs", "12", "--workers", "2"]
    result = CliRunner().invoke(cli, [*args, "--seed", "11"])

    assert result.exit_code == 0, result.output
    assert "killed worker" in result.output
    assert "runs recovered" in result.output
    assert "12 / 12" in result.output
    assert "every invariant held" in result.output
    # The summary is read from the database; check its key claims there too.
    with psycopg.connect(pg_url) as conn:
        duplicated = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM (SELECT order_id FROM {} GROUP BY 1 HAVING count(*) > 1) d"
            ).format(sql.Identifier(schema, "demo_orders"))
        ).fetchone()
        lapsed = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE event = 'lease_expired'").format(
                sql.Identifier(schema, "history")
            )
        ).fetchone()
    assert duplicated == (0,)
    assert lapsed is not None and lapsed[0] >= 1


def test_demo_refuses_a_named_schema_that_holds_runs(pg_url: str, schema: str) -> None:
    """A schema the user named is never wiped: a second demo there is refused without --reset."""
    base = ["--database-url", pg_url, "--schema", schema, "demo", "--runs", "2", "--workers", "1"]
    first = CliRunner().invoke(cli, [*base, "--no-kill"])
    assert first.exit_code == 0, first.output
    assert "No worker was killed" in first.output

    again = CliRunner().invoke(cli, [*base, "--no-kill"])
    assert again.exit_code == 1
    assert "already holds runs" in again.output
    assert "--reset" in again.output

    reset = CliRunner().invoke(cli, [*base, "--no-kill", "--reset"])
    assert reset.exit_code == 0, reset.output
    assert "2 / 2" in reset.output
