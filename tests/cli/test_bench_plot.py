"""`perdure bench --plot DIR --from FILE`: pictures and the table come from one committed report."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
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
    markdown = _bench_module("markdown")
    table = markdown.table(json.loads(report.read_text()))  # type: ignore[attr-defined]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert table in page, f"docs/benchmarks.md's table is not the one of {report.name}"


def test_a_bad_sweep_is_refused() -> None:
    done = CliRunner().invoke(cli, ["bench", "--sweep", "8,x", "--runs", "1"])
    assert done.exit_code == 2 and "not a list of integers" in done.output


def test_a_bad_map_width_is_refused() -> None:
    done = CliRunner().invoke(cli, ["bench", "--map-widths", "0,10", "--runs", "1"])
    assert done.exit_code == 2 and "--map-widths" in done.output and "at least 1" in done.output


@pytest.mark.timeout(300)
def test_a_sweep_is_recorded_and_drawn_as_a_curve(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "perdure", "bench", "--database-url", pg_url]
    command += ["--runs", "20", "--repeat", "1", "--no-peers", "--samples", "5"]
    command += ["--preload", "0", "--pgbench-seconds", "1", "--sweep", "2,8"]
    command += ["--map-widths", "50,200"]
    command += ["--json", str(out), "--plot", str(tmp_path / "pictures")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["key"]: row for row in json.loads(out.read_text())["rows"]}
    for level in (2, 8):
        assert rows[f"sweep.perdure.c{level}.runs_per_s"]["median"] > 0
    pictures = sorted(p.name for p in (tmp_path / "pictures").iterdir())
    for width in (50, 200):
        assert rows[f"map.w{width}.steps_per_s"]["median"] > 0
    # No preload: the history picture is not drawn rather than drawn empty.
    assert pictures == ["bench-latency.png", "bench-map-width.png", "bench-throughput.png"]
    with Image.open(tmp_path / "pictures" / "bench-throughput.png") as image:
        assert image.text["Source"].startswith("bench.json sha256:")


def test_map_rows_are_drawn_when_a_report_has_them(tmp_path: Path) -> None:
    report = json.loads(newest_report().read_text())
    for width, rate in ((10, 900.0), (100, 2100.0), (1000, 2600.0)):
        report["rows"].append({"key": f"map.w{width}.steps_per_s", "median": rate})
    plots = _bench_module("plots")
    written = plots.plot(report, tmp_path)  # type: ignore[attr-defined]
    assert tmp_path / "bench-map-width.png" in written and len(written) == 4


def newest_curves() -> Path:
    """The newest committed curves report (bench/results/curves/): the sweep and map widths."""
    return sorted((ROOT / "bench" / "results" / "curves").glob("*.json"))[-1]


def test_the_committed_curves_show_the_newest_curves_report() -> None:
    report = newest_curves()
    plots = _bench_module("plots")
    source = plots.source_of(report)  # type: ignore[attr-defined]
    rows = {row["key"] for row in json.loads(report.read_text())["rows"]}
    assert any(key.startswith("sweep.perdure.c") for key in rows)
    assert any(key.startswith("map.w") for key in rows)
    for name in ("bench-throughput.png", "bench-map-width.png"):
        with Image.open(IMAGES / "curves" / name) as image:
            assert image.text.get("Source") == source, (
                f"docs/images/curves/{name} was not drawn from {report.name}: run "
                f"perdure bench --plot docs/images/curves --from {report.relative_to(ROOT)}"
            )
