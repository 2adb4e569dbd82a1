"""``perdure bench``: the benchmark of docs/benchmarks.md, in one table.

The measuring code is the scripts under ``bench/`` in perdure's source
checkout (they need the peers and pgbench, which a plain install lacks):
this command finds that folder, runs ``bench/suite.py`` and prints its
report as a table (``--json`` also writes it to a file).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from perdure.cli import render
from perdure.cli.state import checked_url

if TYPE_CHECKING:
    from perdure.cli.state import CliState


def bench_dir() -> Path:
    """The ``bench/`` folder of the source checkout perdure runs from (PERDURE_BENCH_DIR wins)."""
    override = os.environ.get("PERDURE_BENCH_DIR")
    folder = Path(override) if override else Path(__file__).resolve().parents[3] / "bench"
    if not (folder / "suite.py").exists():
        raise click.ClickException(
            f"no benchmark scripts in {folder}: `perdure bench` runs from a source checkout "
            "(git clone, then pip install -e '.[bench]'), or set PERDURE_BENCH_DIR"
        )
    return folder


@click.command()
@click.option(
    "--database-url",
    default=None,
    callback=checked_url,
    help="Use this server (default: start a private one).",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=3000,
    show_default=True,
    help="Runs per throughput measurement (and per peer).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Repetitions; every figure is their median.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Runs in flight in the one worker process (and in each peer).",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Latency samples of each kind per repetition.",
)
@click.option(
    "--peers/--no-peers",
    default=True,
    show_default=True,
    help="Also run DBOS, pgqrs and Absurd (pip install -e '.[bench]').",
)
@click.option(
    "--preload",
    type=click.IntRange(min=0),
    default=100_000,
    show_default=True,
    help="Finished runs written (COPY) for the history-cost figure; 0 skips it.",
)
@click.option(
    "--pgbench-seconds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Duration of each pgbench measurement.",
)
@click.option(
    "--sweep",
    default="",
    metavar="C1,C2,...",
    help="Also measure perdure and each peer at these concurrencies (throughput curve).",
)
@click.option(
    "--map-widths",
    default="1000,10000",
    show_default=True,
    metavar="N1,N2,...",
    help="Measure ctx.map (and the same steps in sequence) at these widths (the map curve).",
)
@click.option(
    "--peer-fanouts",
    default="100,1000",
    show_default=True,
    metavar="N1,N2,...",
    help="With --peers: time each peer's own fan-out of N one-step tasks against perdure's "
    "graph fan-out (widths 100 and 1000).",
)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, writable=True),
    default=None,
    help="Draw the report's pictures (PNG, matplotlib) into this folder.",
)
@click.option(
    "--from",
    "from_json",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Measure nothing: read this report (a --json file) and print or plot it.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write the report to this file as JSON.",
)
@click.pass_obj
def bench(
    state: CliState,
    /,
    database_url: str | None,
    json_path: str | None,
    sweep: str,
    map_widths: str,
    peer_fanouts: str,
    plot_dir: str | None,
    from_json: str | None,
    **options: Any,
) -> None:
    """Measure perdure against pgbench and its peers on one PostgreSQL server.

    Without --database-url the bench starts a private embedded PostgreSQL in a
    temporary folder (with pg_stat_statements, to count statements) and
    removes it afterwards. Takes a few minutes with the defaults.
    With --from FILE nothing is measured: the report in FILE is printed and,
    with --plot DIR, drawn, so that pictures and tables come from one file.
    """
    folder = bench_dir()
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    suite = importlib.import_module("suite")
    if from_json is not None:
        report = json.loads(Path(from_json).read_text())
    else:
        url = database_url or state.url
        err = render.err_console()
        report = suite.run(
            suite.Options(
                url=url,
                json_path=json_path,
                sweep=_levels(sweep, "--sweep"),
                map_widths=_levels(map_widths, "--map-widths"),
                peer_fanouts=_levels(peer_fanouts, "--peer-fanouts"),
                **options,
            ),
            say=lambda line: err.print(Text(line, style="dim")),
        )
    render.console().print(report_table(report, suite.number))
    if plot_dir is not None:
        try:
            plots = importlib.import_module("plots")
            report_file = from_json or json_path
            source = plots.source_of(Path(report_file)) if report_file else ""
            written = plots.plot(report, Path(plot_dir), source)
        except ImportError as exc:
            raise click.ClickException(
                f"--plot needs matplotlib ({exc}): pip install -e '.[bench]'"
            ) from exc
        for path in written:
            click.echo(f"wrote {path}")


def _levels(text: str, option: str) -> tuple[int, ...]:
    """``8,32,128`` as positive integers (concurrencies, widths); a bad list is a usage error."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of integers", param_hint=option) from None
    if any(level < 1 for level in levels):
        raise click.BadParameter("every number must be at least 1", param_hint=option)
    return levels


def report_table(report: dict[str, Any], number: Callable[[float | None], str]) -> Any:
    """The report as one rich table: figure, median, unit, every repetition, goal."""
    table = render.table("figure", "median", "unit", "repetitions", "goal", title=_title(report))
    for row in report["rows"]:
        median = row["median"]
        values = ", ".join(number(v) for v in row["values"]) if len(row["values"]) > 1 else ""
        goal = Text(row["goal"])
        if row["met"] is not None:
            goal.append("  met" if row["met"] else "  missed", "green" if row["met"] else "red")
        shown = Text(number(median)) if median is not None else Text(row["note"] or "n/a", "dim")
        table.add_row(render.text(row["label"]), shown, row["unit"], values, goal)
    return table


def _title(report: dict[str, Any]) -> str:
    machine = report["machine"]
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    return (
        f"perdure bench, {report['when']}: {machine['cores']} cores, load {load}; "
        f"medians of {report['options']['repeat']}"
    )
