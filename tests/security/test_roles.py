"""Who may do what on the dashboard and the HTTP API: one attack per test, each refused.

Tokens carry roles (viewer, viewer-no-payloads, operator, admin); a trusted
proxy's user header names a user from the proxy's addresses only. Every
state-changing call, refused or not, leaves an audit entry naming its actor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import perdure
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard.api import create_standalone
from perdure.dashboard.roles import NamedToken, ProxyAuth, parse_networks

API = "/api/v1"
LOCAL = "http://127.0.0.1"
MARKER = "payload-marker-5be1"
TOKENS = {
    "vera": ("viewer", "vera-token-0123456789"),
    "nora": ("viewer-no-payloads", "nora-token-0123456789"),
    "otto": ("operator", "otto-token-0123456789"),
    "ada": ("admin", "ada-token-0123456789"),
}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name][1]}"}


def named_tokens() -> tuple[NamedToken, ...]:
    return tuple(NamedToken.of(name, role, token) for name, (role, token) in TOKENS.items())


@pytest.fixture
def defined(app: perdure.App) -> perdure.App:
    """An App with workflow 'hold', which waits for signal 'go'."""

    @app.workflow("hold")
    async def hold(ctx: perdure.Context, data: Any) -> Any:
        return await ctx.wait_for_signal("go")

    app.register()
    return app


@pytest.fixture
def held(defined: perdure.App) -> perdure.RunHandle:
    """A run of 'hold' whose input holds the marker."""
    return defined.start("hold", {"secret": MARKER})


MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(defined: perdure.App) -> Iterator[MakeClient]:
    """TestClients of the dashboard (API included) with the test tokens, or other settings."""
    clients: list[TestClient] = []

    def make(client: tuple[str, int] = ("127.0.0.1", 50000), **settings: Any) -> TestClient:
        settings.setdefault("tokens", named_tokens())
        made = TestClient(
            create_app(defined, DashboardConfig(**settings)), base_url=LOCAL, client=client
        )
        clients.append(made)
        return made

    yield make
    for made in clients:
        made.close()


def status_of(app: perdure.App, handle: perdure.RunHandle) -> str:
    return app.get_run(handle.id).status.value


# The API -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/runs/{id}/cancel", {}),
        ("/runs/{id}/signals", {"name": "go", "payload": 1}),
        ("/runs/{id}/pause", {}),
        ("/runs", {"workflow": "hold", "input": 1}),
    ],
)
def test_a_viewer_cannot_change_runs_over_the_api(
    make_client: MakeClient,
    defined: perdure.App,
    held: perdure.RunHandle,
    path: str,
    body: dict[str, Any],
) -> None:
    client = make_client()
    refused = client.post(API + path.format(id=held.id), json=body, headers=bearer("vera"))
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "forbidden"
    # Nothing written: the run is as it was, no signal, no new run.
    assert status_of(defined, held) == "queued"
    assert defined.signals(held.id) == []
    assert len(defined.list_runs()) == 1
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.role, entry.outcome, entry.source) == (
        "vera",
        "viewer",
        "refused",
        "api",
    )
    assert entry.address == "127.0.0.1"
    assert TOKENS["vera"][1] not in json.dumps([entry.detail, entry.actor, entry.address])


def test_an_unknown_token_is_401_and_a_missing_one_too(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    for headers in ({"Authorization": "Bearer not-a-token-we-know"}, {}):
        answer = client.post(f"{API}/runs/{held.id}/cancel", json={}, headers=headers)
        assert answer.status_code == 401 and answer.json()["code"] == "unauthorized"
        assert client.get(f"{API}/runs", headers=headers).status_code == 401
    assert status_of(defined, held) == "queued"


def test_a_viewer_without_payloads_sees_no_payload_fields(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    one = client.get(f"{API}/runs/{held.id}", headers=bearer("nora"))
    assert one.status_code == 200 and one.json()["status"] == "queued"
    listing = client.get(f"{API}/runs", headers=bearer("nora"))
    assert MARKER not in one.text and MARKER not in listing.text
    event = client.get(f"{API}/runs/{held.id}/events/x?timeout=0", headers=bearer("nora"))
    assert event.status_code == 403
    stream = client.get(f"{API}/runs/{held.id}/streams/x", headers=bearer("nora"))
    assert stream.status_code == 403
    # The same calls by a viewer with payloads show the input.
    assert MARKER in client.get(f"{API}/runs/{held.id}", headers=bearer("vera")).text


def test_a_viewer_without_payloads_sees_none_on_the_run_page(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    defined.signal(held.id, "go", {"note": MARKER})
    perdure.testing.drain(defined)
    client = make_client()
    page = client.get(f"/runs/{held.id}", headers=bearer("nora"))
    assert page.status_code == 200 and "nora" in page.text
    assert MARKER not in page.text
    assert MARKER in client.get(f"/runs/{held.id}", headers=bearer("vera")).text


def test_an_operator_acts_and_every_action_is_recorded_with_its_actor(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    calls = [
        (f"/runs/{held.id}/pause", {}, 200),
        (f"/runs/{held.id}/resume", {}, 200),
        (f"/runs/{held.id}/signals", {"name": "go", "payload": MARKER}, 202),
        ("/runs", {"workflow": "hold", "input": MARKER}, 201),
        (f"/runs/{held.id}/cancel", {"reason": "done"}, 200),
        ("/runs/no-such-run/cancel", {}, 404),
    ]
    for path, body, status in calls:
        answer = client.post(API + path, json=body, headers=bearer("otto"))
        assert answer.status_code == status, answer.text
    entries = list(reversed(defined.audit_log()))
    assert [(e.action, e.outcome) for e in entries] == [
        ("pause", "ok"),
        ("resume", "ok"),
        ("signal", "ok"),
        ("start", "ok"),
        ("cancel", "ok"),
        ("cancel", "error"),
    ]
    assert all(e.actor == "otto" and e.via == "token" and e.role == "operator" for e in entries)
    started = [r for r in defined.list_runs() if r.id != held.id]
    assert entries[3].runs == [started[0].id]
    assert entries[5].runs == ["no-such-run"] and entries[5].detail
    assert entries[5].detail["code"] == "run-not-found"
    assert MARKER not in json.dumps([e.detail for e in entries])


# The dashboard's pages -----------------------------------------------------------------


def login(client: TestClient, name: str) -> None:
    page = client.get("/login")
    csrf = client.cookies.get("perdure_csrf")
    assert page.status_code == 200 and csrf
    signed = client.post(
        "/login", data={"token": TOKENS[name][1], "next": "/", "csrf": csrf}, follow_redirects=False
    )
    assert signed.status_code == 303


def test_a_viewer_cannot_cancel_from_the_dashboard(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    login(client, "vera")
    page = client.get(f"/runs/{held.id}")
    assert page.status_code == 200
    assert 'data-signed-in="vera"' in page.text
    assert f"/runs/{held.id}/cancel" not in page.text  # no form to cancel
    csrf = client.cookies.get("perdure_csrf")
    refused = client.post(f"/runs/{held.id}/cancel", data={"csrf": csrf}, follow_redirects=False)
    assert refused.status_code == 403
    assert status_of(defined, held) == "queued"
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.action, entry.outcome, entry.source) == (
        "vera",
        "cancel",
        "refused",
        "dashboard",
    )


def test_a_viewer_cannot_start_from_the_dashboard(
    make_client: MakeClient, defined: perdure.App
) -> None:
    client = make_client()
    login(client, "vera")
    page = client.get("/workflows")
    assert "/workflows/hold/1/start" not in page.text
    csrf = client.cookies.get("perdure_csrf")
    refused = client.post("/workflows/hold/1/start", data={"csrf": csrf, "input": "1"})
    assert refused.status_code == 403
    assert defined.list_runs() == []
    assert [(e.action, e.outcome) for e in defined.audit_log()] == [("start", "refused")]


def test_an_operator_cancels_from_the_dashboard_and_it_is_recorded(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    login(client, "otto")
    page = client.get(f"/runs/{held.id}")
    assert f"/runs/{held.id}/cancel" in page.text and "/audit" not in page.text
    csrf = client.cookies.get("perdure_csrf")
    done = client.post(f"/runs/{held.id}/cancel", data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert status_of(defined, held) == "cancelled"
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.action, entry.outcome, entry.runs) == (
        "otto",
        "cancel",
        "ok",
        [held.id],
    )


def test_the_single_token_still_works_as_admin(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client(token="the-old-single-token", tokens=())
    answer = client.post(
        f"{API}/runs/{held.id}/cancel",
        json={},
        headers={"Authorization": "Bearer the-old-single-token"},
    )
    assert answer.status_code == 200
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.role) == ("admin", "admin")


# A proxy's user header -----------------------------------------------------------------

PROXY = ProxyAuth(
    parse_networks(["10.0.0.0/24"]),
    user_header="X-Forwarded-User",
    groups_header="X-Forwarded-Groups",
    roles={"alice@example.org": "operator", "group:admins": "admin"},
    default_role="viewer",
)


def test_a_proxy_header_from_an_untrusted_address_is_ignored(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client(client=("192.0.2.7", 4000), tokens=(), proxy=PROXY)
    spoofed = {"X-Forwarded-User": "alice@example.org", "X-Forwarded-For": "10.0.0.5"}
    assert client.get(f"{API}/runs", headers=spoofed).status_code == 401
    answer = client.post(f"{API}/runs/{held.id}/cancel", json={}, headers=spoofed)
    assert answer.status_code == 401
    assert client.get("/", headers={**spoofed, "accept": "text/html"}).status_code == 401
    assert status_of(defined, held) == "queued"


def test_from_the_proxy_only_the_configured_header_names_a_user(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client(client=("10.0.0.9", 4000), tokens=(), proxy=PROXY)
    other = {"X-Forwarded-Email": "alice@example.org", "X-Auth-Request-User": "alice"}
    assert client.post(f"{API}/runs/{held.id}/cancel", json={}, headers=other).status_code == 401
    assert status_of(defined, held) == "queued"
    good = {"X-Forwarded-User": "alice@example.org", "X-Forwarded-For": "198.51.100.4"}
    assert client.post(f"{API}/runs/{held.id}/cancel", json={}, headers=good).status_code == 200
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.via, entry.role) == ("alice@example.org", "proxy", "operator")
    assert entry.address == "198.51.100.4 via 10.0.0.9"


def test_proxy_users_get_their_mapped_or_default_role(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client(client=("10.0.0.9", 4000), tokens=(), proxy=PROXY)
    bob = {"X-Forwarded-User": "bob@example.org"}  # no entry: the default role, viewer
    assert client.post(f"{API}/runs/{held.id}/pause", json={}, headers=bob).status_code == 403
    page = client.get("/", headers=bob)
    assert 'data-signed-in="bob@example.org"' in page.text and ">viewer<" in page.text
    root = {"X-Forwarded-User": "root@example.org", "X-Forwarded-Groups": "staff, admins"}
    assert client.get("/audit", headers=root).status_code == 200
    assert client.get("/audit", headers=bob).status_code == 403


def test_tokens_file_and_environment_configure_named_tokens(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens"
    path.write_text("# name:role:token\nvera:viewer:vera-token-0123456789\n")
    monkeypatch.setenv("PERDURE_TOKENS", "otto:operator:otto-token-0123456789")
    config = DashboardConfig.from_options(host="0.0.0.0", tokens_file=str(path))
    assert [(t.name, t.role) for t in config.all_tokens] == [
        ("otto", "operator"),
        ("vera", "viewer"),
    ]
    assert "vera-token" not in repr(config)  # only digests are kept
    path.write_text("vera:superuser:vera-token-0123456789\n")
    with pytest.raises(perdure.ConfigurationError, match="role"):
        DashboardConfig.from_options(tokens_file=str(path))
    path.write_text("vera:viewer:short\n")
    with pytest.raises(perdure.ConfigurationError, match="at least 12") as refused:
        DashboardConfig.from_options(tokens_file=str(path))
    assert "short" not in str(refused.value)


def test_the_standalone_api_applies_the_roles(
    defined: perdure.App, held: perdure.RunHandle
) -> None:
    config = DashboardConfig(host="0.0.0.0", tokens=named_tokens())
    with TestClient(create_standalone(defined, config), base_url="http://perdure.internal") as c:
        refused = c.post(f"{API}/runs/{held.id}/cancel", json={}, headers=bearer("nora"))
        assert refused.status_code == 403
        assert (
            c.post(f"{API}/runs/{held.id}/cancel", json={}, headers=bearer("ada")).status_code
            == 200
        )
    assert [(e.actor, e.outcome) for e in defined.audit_log()] == [
        ("ada", "ok"),
        ("nora", "refused"),
    ]


def test_the_audit_page_is_for_admins(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    client.post(f"{API}/runs/{held.id}/pause", json={}, headers=bearer("vera"))
    assert client.get("/audit", headers=bearer("otto")).status_code == 403
    page = client.get("/audit", headers=bearer("ada"))
    assert page.status_code == 200
    assert re.search(r"vera.*pause.*refused", page.text, re.S)
    assert "/audit" in page.text


def test_a_forged_form_post_is_refused_and_recorded(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    login(client, "otto")
    forged = client.post(
        f"/runs/{held.id}/cancel", data={"csrf": "forged.value"}, follow_redirects=False
    )
    assert forged.status_code == 403
    assert status_of(defined, held) == "queued"
    (entry,) = defined.audit_log()
    assert (entry.actor, entry.action, entry.outcome) == ("otto", "cancel", "refused")


def test_every_dashboard_action_leaves_an_entry_with_its_actor(
    make_client: MakeClient, defined: perdure.App, held: perdure.RunHandle
) -> None:
    client = make_client()
    login(client, "ada")
    csrf = client.cookies.get("perdure_csrf")
    posts = [
        ("pause", {}),
        ("resume", {}),
        ("signal", {"name": "go", "payload": json.dumps(MARKER)}),
        ("cancel", {"reason": "done"}),
        ("retry", {}),
    ]
    for action, fields in posts:
        done = client.post(
            f"/runs/{held.id}/{action}", data={"csrf": csrf, **fields}, follow_redirects=False
        )
        assert done.status_code == 303, (action, done.text[:300])
    started = client.post("/workflows/hold/1/start", data={"csrf": csrf, "input": "1"})
    assert started.status_code == 200
    entries = list(reversed(defined.audit_log()))
    assert [(e.action, e.outcome) for e in entries] == [
        *[(action, "ok") for action, _ in posts],
        ("start", "ok"),
    ]
    assert all(e.actor == "ada" and e.source == "dashboard" for e in entries)
    assert entries[2].detail == {"name": "go"}
    new = [r.id for r in defined.list_runs() if r.id != held.id]
    assert entries[-1].runs == new
