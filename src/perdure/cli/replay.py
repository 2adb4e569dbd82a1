"""``perdure check-replay``: would this code still replay the runs in flight?"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from perdure.cli import render
from perdure.cli.options import json_option
from perdure.testing.replay import check_replay, load_export, patch_statuses

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command("check-replay")
@click.argument("target", metavar="APP")
@click.option(
    "--from",
    "source",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Replay the runs of this file (from `perdure runs export`) instead of the database.",
)
@json_option(
    "Print [{run_id, workflow, version, ok, problem, patches}] as JSON (exit code as without); "
    "patches maps each ctx.patched id the run met to whether it took the new code path."
)
@click.pass_obj
def check_replay_command(state: CliState, target: str, source: str | None, as_json: bool) -> None:
    """Replay in-flight runs against the workflow code of APP, with no side effects.

    Reports each run whose recorded steps the code would not ask for in the
    same order (the determinism guard would stop it after a deploy), with the
    first diverging position. Appending steps after a run's history is safe.
    Exits 1 if any run would diverge, so CI can block the deploy. For each
    ctx.patched id the code uses, says how many open runs were recorded
    before the patch: none means its old code path can be removed.
    """
    from perdure.cli.state import load_app

    app = load_app(target)
    if state.url is not None or state.schema is not None:
        app.configure(url=state.url, schema=state.schema)
    with app:
        runs = load_export(source) if source else None
        reports = check_replay(app, runs)
    bad = sum(1 for r in reports if not r.ok)
    if as_json:
        render.echo_json(
            [
                {
                    "run_id": r.run_id,
                    "workflow": r.workflow,
                    "version": r.version,
                    "ok": r.ok,
                    "problem": None if r.ok else r.describe(),
                    "patches": dict(r.patches),
                }
                for r in reports
            ]
        )
        if bad:
            raise SystemExit(1)
        return
    table = Table("run", "workflow", "result", title=f"check-replay: {len(reports)} run(s)")
    for report in reports:
        verdict = "[green]ok[/]" if report.ok else f"[red]{report.describe().split(': ', 1)[1]}[/]"
        table.add_row(report.run_id, f"{report.workflow}@{report.version}", verdict)
    Console().print(table)
    for status in patch_statuses(reports):
        click.echo(status.describe())
    if bad:
        click.echo(f"{bad} run(s) would not replay against this code", err=True)
        raise SystemExit(1)
    click.echo(f"all {len(reports)} run(s) replay against this code")
