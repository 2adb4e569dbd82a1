"""``perdure demo``: watch durable workflows survive a worker killed mid-flight."""

from __future__ import annotations

import random
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import psycopg
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perdure.api.app import App
from perdure.cli.dashboard import announce, dashboard_options, make_config
from perdure.cli.render import safe_url
from perdure.clock import Clock
from perdure.dashboard import serve as serve_dashboard
from perdure.demo.runner import DemoConfig, DemoError, Summary, run_demo
from perdure.demo.workflows import create_tables
from perdure.store import caller
from perdure.store import migrate as migrations
from perdure.store.statements import Statements, validate_schema

if TYPE_CHECKING:
    from perdure.cli.state import CliState

DEMO_SCHEMA = "perdure_demo"


@click.command()
@click.option(
    "--runs", type=click.IntRange(1, 1000), default=50, show_default=True, help="Runs to start."
)
@click.option(
    "--workers",
    type=click.IntRange(1, 8),
    default=3,
    show_default=True,
    help="Worker processes to start.",
)
@click.option("--seed", type=int, default=None, help="Random seed (default: a new one, printed).")
@click.option("--no-kill", is_flag=True, help="Do not kill a worker mid-flight.")
@click.option(
    "--reset",
    is_flag=True,
    help="With --schema: drop that schema, and everything in it, before the demo.",
)
@click.option(
    "--serve",
    is_flag=True,
    help="Then serve the dashboard over the demo's runs until Ctrl-C (see --port).",
)
@dashboard_options
@click.pass_obj
def demo(
    state: CliState,
    runs: int,
    workers: int,
    seed: int | None,
    no_kill: bool,
    reset: bool,
    serve: bool,
    port: int,
    host: str,
    token: str | None,
    read_only: bool,
) -> None:
    """Watch durable workflows survive a worker killed mid-flight.

    Runs checkouts, ETL batches and signups on real worker processes, kills one
    worker with SIGKILL while it holds runs, and shows from the database that
    every run still completed and no completed step ran twice.

    Uses the schema perdure_demo (dropped and recreated each time) unless
    --schema is given, and the embedded PostgreSQL unless --database-url is.
    With --serve it ends by serving the dashboard over the demo's runs.
    """
    board = make_config(host, port, token, read_only) if serve else None
    console = Console(highlight=False)
    began = time.monotonic()
    schema = validate_schema(state.schema or DEMO_SCHEMA)
    url = state.url or _embedded_url(console)
    seed = seed if seed is not None else random.randrange(1_000_000)
    console.print(
        f"[bold]perdure demo[/]: {runs} runs on {workers} worker(s), seed {seed} "
        f"(--seed {seed} repeats it), schema {schema} on {safe_url(url)}",
        soft_wrap=True,
    )
    prepare_schema(url, schema, owned=state.schema is None, reset=reset)
    log_dir = Path(tempfile.mkdtemp(prefix="perdure-demo-"))
    config = DemoConfig(url, schema, log_dir, runs, workers, seed, kill=not no_kill)
    try:
        summary = run_demo(config, console)
    except DemoError as exc:
        # The workers' logs stay behind for a post-mortem; the message names them.
        raise click.ClickException(str(exc)) from exc
    console.print(_table(summary, time.monotonic() - began))
    _hints(console, state, url, schema, summary)
    problems = summary.problems()
    if not problems:
        shutil.rmtree(log_dir, ignore_errors=True)
        console.print("\n[bold green]All runs completed; every invariant held.[/]")
    if board is not None:
        with App(url, schema=schema) as app:
            serve_dashboard(app, board, ready=lambda _: announce(app, board))
    if problems:
        raise click.ClickException(
            f"the demo found a problem: {'; '.join(problems)} (worker logs in {log_dir})"
        )


def prepare_schema(url: str, schema: str, *, owned: bool, reset: bool) -> None:
    """Give the demo an empty schema with perdure's tables and the demo's own.

    ``owned`` means the schema is the demo's default one, which is dropped and
    recreated. A schema the user named is only dropped with ``reset``; without
    it, a schema that already holds runs or demo data is refused.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        exists = migrations.schema_exists(conn, schema)
        if exists and reset and schema == "public":
            raise click.ClickException("--reset will not drop the public schema")
        if exists and (owned or reset):
            migrations.drop_schema(conn, schema)
        elif exists and _holds_data(conn, url, schema):
            raise click.ClickException(
                f"schema {schema!r} already holds runs or demo data; pass --reset to drop it "
                "and start over, or choose another schema"
            )
    with App(url, schema=schema) as app:
        app.ensure_schema()
    with psycopg.connect(url, autocommit=True) as conn:
        create_tables(conn, schema)


def _holds_data(conn: psycopg.Connection[Any], url: str, schema: str) -> bool:
    demo = Statements(schema, Clock()).demos
    for table in caller.execute_sync(conn, demo.tables()):
        if caller.execute_sync(conn, demo.has_rows(table)):
            return True
    if migrations.current_version(conn, schema) == 0:
        return False  # no perdure tables: no runs (a read would refuse the schema)
    with App(url, schema=schema) as app:
        return bool(app.list_runs(limit=1))


def _embedded_url(console: Console) -> str:
    """Start (or find) the embedded PostgreSQL and say where its data lives."""
    from perdure.store import embedded

    console.print("Using the embedded PostgreSQL (no --database-url given); starting it…")
    server = embedded.ensure_server()
    console.print(f"Embedded PostgreSQL: {embedded.removal_hint(server.data_dir)}", soft_wrap=True)
    return server.url


def _check(ok: bool) -> Text:
    return Text("✓", style="bold green") if ok else Text("✗", style="bold red")


def _table(summary: Summary, wall: float) -> Table:
    """The summary: what happened, and a check mark for each invariant."""
    table = Table(title="What the database says happened", title_justify="left", show_header=False)
    table.add_column("", no_wrap=True)
    table.add_column("", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("")
    blank = Text("")
    done, failed = summary.statuses["completed"], summary.statuses["failed"]
    table.add_row("runs completed", f"{done} / {summary.total}", _check(done == summary.total))
    if failed:
        table.add_row("runs failed", str(failed), _check(False))
    table.add_row("steps checkpointed", str(summary.steps_checkpointed), blank)
    table.add_row(
        "step retries",
        str(summary.step_retries),
        blank,
        "payment gateway timeouts, retried with backoff",
    )
    kill = summary.kill
    if kill is not None:
        table.add_row(
            "worker killed",
            f"pid {kill.pid}",
            blank,
            f"{kill.worker_id}, holding {kill.held} run{'s' if kill.held != 1 else ''}, "
            f"after {kill.completed_before} of {summary.total} runs completed",
        )
    by = ", ".join(f"{w}: {n}" for w, n in summary.recovered_by.most_common())
    table.add_row(
        "runs recovered",
        str(len(summary.recovered)),
        blank,
        f"their leases lapsed; finished by {by}" if by else "no lease lapsed",
    )
    table.add_row(
        "in-flight steps re-run",
        str(summary.reexecuted),
        _check(summary.reexecuted_unexplained == 0),
        "plain steps running at the crash ran again (at least once)",
    )
    table.add_row(
        "completed steps re-run",
        str(len(summary.completed_steps_rerun)),
        _check(not summary.completed_steps_rerun),
        "a checkpointed step never runs again",
    )
    orders_ok = not summary.duplicate_orders and not summary.missing_orders
    table.add_row(
        "orders recorded",
        f"{summary.orders} / {summary.completed_checkouts}",
        _check(orders_ok and summary.orders == summary.completed_checkouts),
        "one per completed checkout: ctx.transaction is exactly once",
    )
    table.add_row("wall time", f"{wall:.1f} s", blank)
    return table


def _hints(console: Console, state: CliState, url: str, schema: str, summary: Summary) -> None:
    """Where to look next: the CLI, and SQL on the demo's and perdure's tables."""
    if summary.kill is None:
        console.print("No worker was killed (--no-kill, or no worker held a run at the time).")
    elif summary.replacement:
        console.print("The only worker was killed, so the demo started a replacement.")
    program = invoked_as()
    prefix = [*program]
    if state.url is not None:
        prefix += ["--database-url", safe_url(state.url)]
    prefix += ["--schema", schema]
    base = shlex.join(prefix)
    console.print("\n[bold]Look around[/]")
    console.print(Text(f"  {base} runs list"), soft_wrap=True)
    demo_again = shlex.join([*program, "demo", "--serve"])
    console.print(Text(f"  {base} dashboard   # or: {demo_again}"), soft_wrap=True)
    if summary.sample is not None:
        note = "   # a run recovered after the crash" if summary.recovered else ""
        show = f"  {base} runs show {shlex.quote(summary.sample)}{note}"
        console.print(Text(show), soft_wrap=True)
    console.print(
        Text(f"\nOr ask the database: psql {shlex.quote(safe_url(url))}", style="bold"),
        soft_wrap=True,
    )
    queries = [
        query + (f"   -- {note}" if note else "")
        for query, note in Statements(schema, Clock()).demos.looks()
    ]
    for query in queries:
        console.print(Text(f"  {query}"), soft_wrap=True)
    if state.url is None:
        stop = shlex.join([*program, "embedded", "stop"])
        console.print(
            Text(
                f"\nThe embedded PostgreSQL keeps running after the demo; stop it with: {stop}",
                style="bold",
            ),
            soft_wrap=True,
        )


def invoked_as(argv0: str | None = None) -> list[str]:
    """The command that runs perdure as the user typed it, for hints to paste.

    ``perdure`` when that is the program found on PATH; else the path that was
    run (``.venv/bin/perdure`` right after the README's quickstart, where no
    ``perdure`` is on PATH); ``python -m perdure`` for ``python -m perdure``.
    """
    given = sys.argv[0] if argv0 is None else argv0
    name = Path(given).name
    if name == "__main__.py" or name.startswith("-"):
        return [Path(sys.executable).name, "-m", "perdure"]
    if name != "perdure":
        return ["perdure"]
    on_path = shutil.which("perdure")
    if on_path is not None and Path(on_path).resolve() == Path(given).resolve():
        return ["perdure"]
    return [given]
