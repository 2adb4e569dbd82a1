"""Worker options are typed (a TypedDict unpacked into ``**options``): mypy checks callers,
and a bad option is still refused at run time with ConfigurationError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import perdure
from perdure.engine.options import WorkerArguments, WorkerKeywords, WorkerOptions

ROOT = Path(__file__).resolve().parents[2]

CALLERS = """
import perdure
from perdure import testing

app = perdure.App()
app.worker(concurrency=3, queues=["a"], lease_seconds=10.0, prune_after=None)
app.worker(concurency=3)
app.worker(concurrency="3")
app.run_worker(poll_seconds=1.0, metrics_port="9000")
testing.drain(app, lease_seconds=30, worker_ids="w")
"""


def test_mypy_checks_the_callers_of_worker_options(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    script = tmp_path / "callers.py"
    script.write_text(CALLERS)
    cwd = os.getcwd()
    os.chdir(ROOT)  # the project's mypy settings, with perdure from src
    try:
        out, _, status = api.run(["--strict", str(script)])
    finally:
        os.chdir(cwd)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert [line.split(":")[1] for line in errors] == ["7", "8", "9", "10"], out
    assert 'Unexpected keyword argument "concurency"' in errors[0]
    assert '"concurrency" has incompatible type "str"' in errors[1]
    assert '"metrics_port" has incompatible type "str"' in errors[2]
    assert 'Unexpected keyword argument "worker_ids"' in errors[3]


def test_the_typed_options_are_the_worker_options() -> None:
    fields = set(WorkerOptions.__dataclass_fields__)
    assert set(WorkerKeywords.__annotations__) == fields
    assert set(WorkerArguments.__annotations__) - fields == {
        "metrics_port",
        "metrics_host",
        "tracing",
        "tracer_provider",
        "observers",
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurency": 3}, "unknown worker option"),
        ({"concurrency": "3"}, "concurrency"),
        ({"prune_after": -1}, "prune_after"),
    ],
)
def test_a_bad_option_is_still_refused_at_run_time(
    app: perdure.App, options: dict[str, object], message: str
) -> None:
    @app.workflow("noop")
    def noop(ctx: perdure.SyncContext, value: None) -> None:
        return None

    with pytest.raises(perdure.ConfigurationError, match=message):
        app.worker(**options)  # type: ignore[arg-type]
