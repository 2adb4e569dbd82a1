"""Features other work adds to the library appear on the pages as soon as the App has them.

Fork (``app.fork(run_id, from_step=...)``) and schedules (``app.schedules()``)
are being built elsewhere; these stand-ins have their announced shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

import perdure
from dashboard.workload import define
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain


class FutureApp(perdure.App):
    """An App with fork and schedules, as the operating work will give it."""

    forked: list[tuple[str, str]]

    def fork(self, run_id: str, *, from_step: str) -> perdure.RunHandle:
        """Record the call; start a plain copy of the run."""
        self.forked.append((run_id, from_step))
        run = self.get_run(run_id)
        return self.start(run.workflow, run.input)

    def schedules(self) -> list[dict[str, Any]]:
        """One schedule, due in an hour, shaped like perdure.ScheduleInfo."""
        tick = datetime.now(UTC) + timedelta(hours=1)
        return [
            {
                "name": "nightly",
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "workflow": "etl",
                "input": {"scope": "all"},
                "catchup": "latest",
                "paused": False,
                "next_tick": tick,
                "last_tick": None,
                "last_run_id": None,
            }
        ]


class PastApp(perdure.App):
    """An App of a perdure without fork and schedules."""

    fork = None
    schedules = None


@pytest.fixture
def future(pg_url: str, schema: str) -> Iterator[FutureApp]:
    """A FutureApp with the test workflows, on this test's schema."""
    app = FutureApp(pg_url, schema=schema)
    app.forked = []
    define(app)
    app.register()
    yield app
    app.close()


@pytest.fixture
def past(pg_url: str, schema: str) -> Iterator[PastApp]:
    """A PastApp with the test workflows, on this test's schema."""
    app = PastApp(pg_url, schema=schema)
    define(app)
    app.register()
    yield app
    app.close()


def client_of(app: perdure.App) -> TestClient:
    """A TestClient of ``app``'s dashboard, as a browser on this machine."""
    return TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1")


def test_fork_form_appears_with_the_library_call_and_starts_a_run(future: FutureApp) -> None:
    run = future.start("greet", "ada")
    drain(future)
    with client_of(future) as client:
        page = client.get(f"/runs/{run.id}")
        assert "Fork…" in page.text
        assert "<option>lookup</option>" in page.text and "<option>compose</option>" in page.text
        csrf = client.cookies["perdure_csrf"]
        answer = client.post(
            f"/runs/{run.id}/fork",
            data={"csrf": csrf, "step": "compose"},
            follow_redirects=False,
        )
    assert answer.status_code == 303
    assert future.forked == [(run.id, "compose")]
    new_id = answer.headers["location"].split("/runs/")[1].split("?")[0]
    assert new_id != run.id and future.get_run(new_id).input == "ada"
    assert answer.headers["location"].endswith("?done=fork")


def test_without_fork_there_is_no_fork_form(past: PastApp) -> None:
    run = past.start("greet", "ada")
    drain(past)
    with client_of(past) as client:
        page = client.get(f"/runs/{run.id}")
        assert page.status_code == 200 and "Fork…" not in page.text
        csrf = client.cookies["perdure_csrf"]
        refused = client.post(f"/runs/{run.id}/fork", data={"csrf": csrf, "step": "compose"})
    assert refused.status_code == 400 and "cannot fork" in refused.text


def test_schedules_show_on_the_overview_only_when_the_library_has_them(
    future: FutureApp, past: PastApp
) -> None:
    with client_of(future) as client:
        page = client.get("/").text
    assert "Schedules" in page and "<code>0 3 * * *</code>" in page and "nightly" in page
    assert "in 59 min" in page or "in 1 h" in page
    assert "Europe/Paris" in page and "active" in page
    assert "catchup" not in page  # the overview keeps to the columns it names
    with client_of(past) as client:
        assert "Schedules" not in client.get("/").text
