"""Fixtures of the dashboard tests: the test workflows, a worker, a served dashboard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import perdure
from dashboard.workload import FAST, Flaky, Workload, define, run_workload
from helpers import BackgroundWorker


@pytest.fixture
def defined(app: perdure.App) -> perdure.App:
    """The App with the test workflows registered."""
    Flaky.failing = True
    define(app)
    app.register()
    return app


@pytest.fixture
def worker(defined: perdure.App) -> Iterator[BackgroundWorker]:
    """A real worker of the test workflows, on a thread of this process."""
    with BackgroundWorker(defined, **FAST) as running:
        yield running


@pytest.fixture
def workload(defined: perdure.App, worker: BackgroundWorker) -> Workload:
    """The known workload, settled."""
    return run_workload(defined)
