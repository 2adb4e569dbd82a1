"""Starting a run from a workflow's page: the form, its JSON check, its guards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

import perdure
from perdure.dashboard import DashboardConfig, create_app

LOCAL = "http://127.0.0.1"


@pytest.fixture
def client(defined: perdure.App) -> Iterator[TestClient]:
    """A browser on this machine, with the page's CSRF cookie."""
    with TestClient(create_app(defined, DashboardConfig()), base_url=LOCAL) as made:
        made.get("/workflows")
        yield made


def test_the_start_form_starts_a_run_with_the_typed_input_key_and_queue(
    client: TestClient, defined: perdure.App
) -> None:
    page = client.get("/workflows")
    assert 'action="/workflows/greet/1/start"' in page.text
    assert "data-json" in page.text  # the browser checks the input is JSON
    answer = client.post(
        "/workflows/greet/1/start",
        data={
            "csrf": client.cookies["perdure_csrf"],
            "input": '{"who": "ada"}',
            "key": "greet:ada",
            "queue": "special",
        },
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert answer.headers["location"].endswith("?done=start")
    run_id = answer.headers["location"].split("/runs/")[1].split("?")[0]
    run = defined.get_run(run_id)
    assert (run.workflow, run.version, run.input, run.key, run.queue) == (
        "greet",
        1,
        {"who": "ada"},
        "greet:ada",
        "special",
    )
    shown = client.get(answer.headers["location"])
    assert "Run started." in shown.text


def test_input_that_is_not_json_is_refused_and_starts_nothing(
    client: TestClient, defined: perdure.App
) -> None:
    answer = client.post(
        "/workflows/greet/1/start",
        data={"csrf": client.cookies["perdure_csrf"], "input": "{not json", "key": "k"},
    )
    assert answer.status_code == 400
    assert "the input is not valid JSON" in answer.text
    assert "no run was started" in answer.text
    assert "{not json" in answer.text  # the form keeps what was typed
    assert defined.list_runs(workflow="greet") == []


def test_a_start_without_the_csrf_token_is_refused(
    client: TestClient, defined: perdure.App
) -> None:
    answer = client.post("/workflows/greet/1/start", data={"input": "1"})
    assert answer.status_code == 403
    forged = client.post("/workflows/greet/1/start", data={"input": "1", "csrf": "x"})
    assert forged.status_code == 403
    assert defined.list_runs(workflow="greet") == []


def test_a_read_only_dashboard_hides_the_form_and_refuses_a_start(defined: perdure.App) -> None:
    web = create_app(defined, DashboardConfig(read_only=True))
    with TestClient(web, base_url=LOCAL) as client:
        page = client.get("/workflows")
        assert page.status_code == 200
        assert "/start" not in page.text and "Start run" not in page.text
        csrf = client.cookies["perdure_csrf"]
        refused = client.post("/workflows/greet/1/start", data={"csrf": csrf, "input": "1"})
    assert refused.status_code == 403
    assert defined.list_runs(workflow="greet") == []
