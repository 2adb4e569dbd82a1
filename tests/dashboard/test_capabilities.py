"""Fork and schedules on the dashboard, through the real App's calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

import perdure
from dashboard.workload import define
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain


@pytest.fixture
def app(pg_url: str, schema: str) -> Iterator[perdure.App]:
    """An App with the dashboard's test workflows, on this test's schema."""
    made = perdure.App(pg_url, schema=schema)
    define(made)
    made.register()
    yield made
    made.close()


def client_of(app: perdure.App) -> TestClient:
    """A TestClient of ``app``'s dashboard, as a browser on this machine."""
    return TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1")


def test_the_fork_form_forks_the_run_from_the_chosen_step(app: perdure.App) -> None:
    run = app.start("greet", "ada")
    drain(app)
    with client_of(app) as client:
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
    assert answer.headers["location"].endswith("?done=fork")
    new_id = answer.headers["location"].split("/runs/")[1].split("?")[0]
    forked = app.get_run(new_id)
    assert new_id != run.id
    assert (forked.forked_from, forked.fork_step, forked.input) == (run.id, "compose", "ada")
    # The step before the fork point was copied, not run again; the rest runs.
    copied = {s.name: s.status for s in app.steps(new_id)}
    assert copied == {"lookup": perdure.StepStatus.COMPLETED}
    drain(app)
    assert app.handle(new_id).result(timeout=5) == "hello ada"


def test_a_fork_from_a_step_the_run_lacks_is_refused_and_starts_nothing(
    app: perdure.App,
) -> None:
    run = app.start("greet", "ada")
    drain(app)
    with client_of(app) as client:
        client.get(f"/runs/{run.id}")
        csrf = client.cookies["perdure_csrf"]
        refused = client.post(f"/runs/{run.id}/fork", data={"csrf": csrf, "step": "nope"})
    assert refused.status_code == 400 and "nope" in refused.text
    assert [r.id for r in app.list_runs()] == [run.id]


def test_the_overview_lists_the_apps_schedules(app: perdure.App) -> None:
    with client_of(app) as client:
        assert "No schedule." in client.get("/").text
    app.add_schedule(
        "nightly",
        "0 3 * * *",
        workflow="greet",
        input={"scope": "all"},
        timezone="Europe/Paris",
    )
    with client_of(app) as client:
        page = client.get("/").text
    assert "No schedule." not in page
    assert "<code>0 3 * * *</code>" in page and "nightly" in page
    assert "Europe/Paris" in page and "active" in page
    assert "catchup" not in page  # the overview keeps to the columns it names
