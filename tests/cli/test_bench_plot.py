"""`perdure bench --plot DIR --from FILE`: pictures and the table come from one committed report."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from click.testing import CliRunner
from PIL import Image

from perdure.cli.bench import bench_dir
from perdure.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
PICTURES = ("bench-throughput.png", "bench-latency.png", "bench-history.png")


def _bench_module(name: str) -> object:
    folder = str(bench_dir())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def newest_report() -> Path:
    """The newest committed report, the one the docs show."""
    return sorted((ROOT / "bench" / "results").glob("*.json"))[-1]


def test_plots_are_drawn_from_a_committed_report(tmp_path: Path) -> None:
    report = newest_report()
    done = CliRunner().invoke(
        cli, ["bench", "--from", str(report), "--plot", str(tmp_path)], catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    assert "perdure: 3-step runs, 1 worker" in done.output  # the table, from the same file
    plots = _bench_module("plots")
    source = plots.source_of(report)  # type: ignore[attr-defined]
    for name in PICTURES:
        assert f"wrote {tmp_path / name}" in done.output
        with Image.open(tmp_path / name) as image:
            assert image.text["Source"] == source
            assert image.size[0] > 400 and image.size[1] > 200


def test_the_committed_pictures_and_table_show_the_newest_report() -> None:
    report = newest_report()
    plots = _bench_module("plots")
    source = plots.source_of(report)  # type: ignore[attr-defined]
    for name in PICTURES:
        with Image.open(IMAGES / name) as image:
            assert image.text.get("Source") == source, (
                f"docs/images/{name} was not drawn from {report.name}: run "
                f"perdure bench --plot docs/images --from {report.relative_to(ROOT)}"
            )
    import json

    markdown = _bench_module("markdown")
    table = markdown.table(json.loads(report.read_text()))  # type: ignore[attr-defined]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert table in page, f"docs/benchmarks.md's table is not the one of {report.name}"


def test_a_bad_sweep_is_refused() -> None:
    done = CliRunner().invoke(cli, ["bench", "--sweep", "8,x", "--runs", "1"])
    assert done.exit_code == 2 and "not a list of integers" in done.output
