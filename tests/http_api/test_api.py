"""The HTTP JSON API under /api/v1: every answer is checked against the OpenAPI document."""

from __future__ import annotations

import json

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker
from http_api.conftest import MakeClient
from http_api.workload import FAST
from perdure.dashboard.api import create_api, routes
from perdure.dashboard.api.openapi import DOCUMENT
from perdure.dashboard.config import DashboardConfig

API = "/api/v1"
TOKEN = "api-token-for-tests-0123"


def problem_of(response: object) -> dict[str, object]:
    """The problem document of a refused call (its media type checked)."""
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    body: dict[str, object] = response.json()  # type: ignore[attr-defined]
    return body


def test_every_route_is_documented_and_every_documented_route_exists(
    defined: perdure.App,
) -> None:
    served = {
        (route.path, method.lower())
        for route in routes()
        for method in (route.methods or set())
        if method != "HEAD"
    }
    documented = {(path, method) for path, item in DOCUMENT["paths"].items() for method in item}
    assert served == documented
    api = create_api(defined, DashboardConfig())
    assert all(isinstance(route, Route) for route in api.routes)


def test_the_document_is_served(client: TestClient) -> None:
    answer = client.get(f"{API}/openapi.json")
    assert answer.status_code == 200
    assert answer.json() == json.loads(json.dumps(DOCUMENT))


def test_dashboard_mounts_the_api(defined: perdure.App) -> None:
    from perdure.dashboard import create_app

    web = create_app(defined, DashboardConfig())
    assert any(isinstance(r, Mount) and r.path == API for r in web.routes)


def test_start_is_idempotent_by_key_and_header(client: TestClient) -> None:
    body = {"workflow": "echo", "input": {"n": 1}, "tags": {"team": "a"}}
    first = client.post(f"{API}/runs", json=body, headers={"Idempotency-Key": "order-1"})
    assert first.status_code == 201
    run = first.json()
    assert (run["workflow"], run["queue"], run["key"], run["status"]) == (
        "echo",
        "sqlq",
        "order-1",
        "queued",
    )
    assert first.headers["location"] == f"{API}/runs/{run['id']}"
    again = client.post(f"{API}/runs", json=body, headers={"Idempotency-Key": "order-1"})
    assert (again.status_code, again.json()["id"]) == (200, run["id"])
    by_field = client.post(f"{API}/runs", json={**body, "key": "order-1"})
    assert (by_field.status_code, by_field.json()["id"]) == (200, run["id"])
    assert client.get(f"{API}/runs/order-1").json()["id"] == run["id"]
    assert client.get(f"{API}/runs/{run['id']}").json()["input"] == {"n": 1}


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        ({"workflow": "no.such"}, {}, 422, "unknown-workflow"),
        ({"input": 1}, {}, 400, "invalid-argument"),
        ({"workflow": "echo", "bogus": 1}, {}, 400, "invalid-argument"),
        ({"workflow": "echo", "priority": "high"}, {}, 400, "invalid-argument"),
        ({"workflow": "echo", "delay": -1}, {}, 400, "invalid-argument"),
        ({"workflow": "echo", "key": "a"}, {"Idempotency-Key": "b"}, 400, "invalid-argument"),
    ],
)
def test_a_bad_start_is_a_problem_and_writes_nothing(
    client: TestClient,
    defined: perdure.App,
    body: dict[str, object],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    answer = client.post(f"{API}/runs", json=body, headers=headers)
    assert answer.status_code == status
    assert problem_of(answer)["code"] == code
    assert len(defined.list_runs()) == 0


def test_a_body_that_is_not_json_is_refused(client: TestClient) -> None:
    answer = client.post(
        f"{API}/runs", content=b"workflow=echo", headers={"content-type": "text/plain"}
    )
    assert (answer.status_code, problem_of(answer)["code"]) == (415, "unsupported-media-type")
    answer = client.post(
        f"{API}/runs", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert (answer.status_code, problem_of(answer)["code"]) == (400, "invalid-json")


def test_unknown_runs_and_routes_are_problems(client: TestClient) -> None:
    answer = client.get(f"{API}/runs/nothing-here")
    assert (answer.status_code, problem_of(answer)["code"]) == (404, "run-not-found")


def test_list_with_filters_and_a_cursor(client: TestClient) -> None:
    ids = [
        client.post(
            f"{API}/runs", json={"workflow": "echo", "key": f"k{i}", "tags": {"i": str(i % 2)}}
        ).json()["id"]
        for i in range(5)
    ]
    client.post(f"{API}/runs", json={"workflow": "chat", "key": "other"})
    seen: list[str] = []
    cursor = None
    while True:
        params = {"workflow": "echo", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = client.get(f"{API}/runs", params=params).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    tagged = client.get(f"{API}/runs", params={"tag": "i=1"}).json()["runs"]
    assert sorted(r["key"] for r in tagged) == ["k1", "k3"]
    answer = client.get(f"{API}/runs", params={"status": "sideways"})
    assert (answer.status_code, problem_of(answer)["code"]) == (400, "invalid-argument")


def test_pause_resume_cancel_and_their_refusals(client: TestClient) -> None:
    run = client.post(f"{API}/runs", json={"workflow": "echo", "key": "steer"}).json()
    assert client.post(f"{API}/runs/steer/pause").json()["status"] == "paused"
    assert client.post(f"{API}/runs/steer/resume").json()["status"] == "queued"
    refused = client.post(f"{API}/runs/steer/resume")
    assert (refused.status_code, problem_of(refused)["code"]) == (409, "invalid-run-state")
    cancelled = client.post(f"{API}/runs/{run['id']}/cancel", json={"reason": "not needed"})
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["error"]["message"] == "not needed"
    refused = client.post(f"{API}/runs/steer/signals", json={"name": "reply"})
    assert (refused.status_code, problem_of(refused)["code"]) == (409, "invalid-run-state")


def test_signal_result_event_and_stream_against_a_worker(
    client: TestClient, defined: perdure.App
) -> None:
    run = client.post(f"{API}/runs", json={"workflow": "chat", "input": {}}).json()
    early = client.get(f"{API}/runs/{run['id']}/result", params={"timeout": "0"})
    assert (early.status_code, early.json()["done"]) == (202, False)
    with BackgroundWorker(defined, **FAST):
        event = client.get(f"{API}/runs/{run['id']}/events/ready", params={"timeout": "30"})
        assert event.json() == {"key": "ready", "value": {"stage": 1}}
        missing = client.get(f"{API}/runs/{run['id']}/events/never", params={"timeout": "0"})
        assert problem_of(missing)["code"] == "event-not-published"
        sent = client.post(
            f"{API}/runs/{run['id']}/signals", json={"name": "reply", "payload": "world"}
        )
        assert sent.status_code == 202
        done = client.get(f"{API}/runs/{run['id']}/result", params={"timeout": "30"})
        assert (done.status_code, done.json()["output"]) == (200, {"got": "world"})
    with client.stream("GET", f"{API}/runs/{run['id']}/streams/words") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        text = "".join(stream.iter_text())
    assert text == (
        'id: 1\nevent: entry\ndata: "hello"\n\n'
        'id: 2\nevent: entry\ndata: "world"\n\n'
        'event: end\ndata: {"entries": 2}\n\n'
    )
    with client.stream(
        "GET", f"{API}/runs/{run['id']}/streams/words", headers={"Last-Event-ID": "1"}
    ) as stream:
        resumed = "".join(stream.iter_text())
    assert resumed.startswith('id: 2\nevent: entry\ndata: "world"')
    too_long = client.get(f"{API}/runs/{run['id']}/result", params={"timeout": "9999"})
    assert problem_of(too_long)["code"] == "invalid-argument"


def test_with_a_token_every_call_needs_the_bearer_header(make_client: MakeClient) -> None:
    client = make_client(token=TOKEN)
    refused = client.get(f"{API}/runs")
    assert refused.status_code == 401
    assert problem_of(refused)["code"] == "unauthorized"
    assert refused.headers["www-authenticate"].startswith("Bearer")
    wrong = client.get(f"{API}/runs", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert wrong.status_code == 401
    good = client.get(f"{API}/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert good.status_code == 200
    # The dashboard's login cookie opens its pages, not the API.
    client.cookies.set("perdure_auth", client.app.state.dashboard.guard.session_cookie())  # type: ignore[attr-defined]
    assert client.get("/").status_code == 200
    assert client.get(f"{API}/runs").status_code == 401


def test_read_only_and_other_sites_cannot_post(make_client: MakeClient) -> None:
    read_only = make_client(read_only=True)
    refused = read_only.post(f"{API}/runs", json={"workflow": "echo"})
    assert (refused.status_code, problem_of(refused)["code"]) == (403, "read-only")
    assert read_only.get(f"{API}/runs").status_code == 200
    client = make_client()
    other = client.post(
        f"{API}/runs", json={"workflow": "echo"}, headers={"Origin": "https://evil.example"}
    )
    assert (other.status_code, problem_of(other)["code"]) == (403, "cross-origin")


def test_without_a_token_only_loopback_host_names_are_served(client: TestClient) -> None:
    answer = client.get(f"{API}/runs", headers={"Host": "rebound.example:8080"})
    assert answer.status_code == 400
