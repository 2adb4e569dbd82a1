"""The dashboard's guards, without a browser: token, CSRF, read-only, headers, escaping."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from dashboard.workload import SCRIPT, Workload
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard.config import TOKEN_ENV

TOKEN = "s3cret-token-for-tests"
LOCAL = "http://127.0.0.1"

MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(defined: perdure.App) -> Iterator[MakeClient]:
    """TestClients of the dashboard of the test App, with the given settings."""
    clients: list[TestClient] = []

    def make(**settings: object) -> TestClient:
        client = TestClient(create_app(defined, DashboardConfig(**settings)), base_url=LOCAL)  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def csrf_of(client: TestClient, path: str = "/") -> str:
    """Load ``path`` and return the CSRF token of its forms (and of the cookie it set)."""
    page = client.get(path)
    cookie = client.cookies.get("perdure_csrf")
    assert cookie, f"{path} set no CSRF cookie"
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is None or found.group(1) == cookie
    return cookie


def test_beyond_loopback_a_token_is_required_or_nothing_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(perdure.ConfigurationError, match="without a token"):
        DashboardConfig(host="0.0.0.0")
    result = CliRunner().invoke(cli, ["dashboard", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code != 0
    assert "refusing to serve the dashboard on 0.0.0.0" in result.output
    assert "--token" in result.output and TOKEN_ENV in result.output
    with pytest.raises(perdure.ConfigurationError, match="at least 12"):
        DashboardConfig(host="0.0.0.0", token="short")
    assert DashboardConfig(host="0.0.0.0", token=TOKEN).token == TOKEN
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert DashboardConfig.from_options(host="0.0.0.0").token == TOKEN
    assert DashboardConfig(host="127.0.0.1").token is None
    assert DashboardConfig(host="::1").url == "http://[::1]:8080/"


def test_without_the_token_every_page_is_401(make_client: MakeClient) -> None:
    client = make_client(host="0.0.0.0", token=TOKEN)
    for path in ("/", "/runs", "/workflows"):
        plain = client.get(path)
        assert plain.status_code == 401, path
        assert plain.headers["www-authenticate"].startswith("Bearer")
        assert "Runs" not in plain.text
    browser = client.get("/runs", headers={"accept": "text/html"})
    assert browser.status_code == 401 and 'name="token"' in browser.text
    wrong = client.get("/runs", headers={"authorization": "Bearer not-the-token-at-all"})
    assert wrong.status_code == 401
    assert client.get("/runs", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/static/dashboard.css").status_code == 200


def test_login_form_sets_a_cookie_that_lets_the_browser_in(make_client: MakeClient) -> None:
    client = make_client(host="0.0.0.0", token=TOKEN)
    token = csrf_of(client, "/login")
    refused = client.post("/login", data={"csrf": token, "token": "guess-guess-guess"})
    assert refused.status_code == 401 and "not the right one" in refused.text
    no_csrf = client.post("/login", data={"token": TOKEN})
    assert no_csrf.status_code == 403
    signed = client.post(
        "/login",
        data={"csrf": token, "token": TOKEN, "next": "//evil.example/x"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    assert TOKEN not in signed.headers["set-cookie"]
    assert "HttpOnly" in signed.headers["set-cookie"]
    assert "samesite=strict" in signed.headers["set-cookie"].lower()
    assert client.get("/runs").status_code == 200
    client.post("/logout", data={"csrf": csrf_of(client)})
    assert client.get("/runs").status_code == 401


def test_actions_without_the_right_csrf_token_are_refused(
    make_client: MakeClient, defined: perdure.App
) -> None:
    run = defined.start("approval", {"doc": 2})
    client = make_client()
    url = f"/runs/{run.id}/cancel"
    assert client.post(url, data={"reason": "x"}).status_code == 403
    csrf = csrf_of(client)
    assert client.post(url, data={"reason": "x", "csrf": csrf + "x"}).status_code == 403
    forged = "nonce.0000"
    client.cookies.set("perdure_csrf", forged)
    assert client.post(url, data={"reason": "x", "csrf": forged}).status_code == 403
    client.cookies.clear()
    csrf = csrf_of(client)
    other_site = client.post(
        url, data={"reason": "x", "csrf": csrf}, headers={"origin": "http://evil.example"}
    )
    assert other_site.status_code == 403
    assert run.status() == "queued"
    done = client.post(url, data={"reason": "from a test", "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].endswith("?done=cancel")
    assert run.status() == "cancelled"
    assert defined.get_run(run.id).error == {"type": "Cancelled", "message": "from a test"}


def test_read_only_hides_actions_and_refuses_posts(
    make_client: MakeClient, defined: perdure.App
) -> None:
    run = defined.start("approval", {"doc": 3})
    client = make_client(read_only=True)
    page = client.get(f"/runs/{run.id}")
    assert page.status_code == 200 and "read-only" in page.text
    assert "/cancel" not in page.text and "Send signal" not in page.text
    csrf = csrf_of(client)
    for action in ("cancel", "retry", "pause", "resume", "signal"):
        refused = client.post(f"/runs/{run.id}/{action}", data={"csrf": csrf, "name": "x"})
        assert refused.status_code == 403, action
    assert run.status() == "queued"


def test_invalid_json_payload_is_shown_and_nothing_is_sent(
    make_client: MakeClient, defined: perdure.App
) -> None:
    run = defined.start("approval", {"doc": 4})
    client = make_client()
    csrf = csrf_of(client)
    answer = client.post(
        f"/runs/{run.id}/signal",
        data={"csrf": csrf, "name": "approve", "payload": "{not json", "key": ""},
    )
    assert answer.status_code == 400
    assert "the payload is not valid JSON" in answer.text and "nothing was sent" in answer.text
    assert "{not json" in answer.text  # the form keeps what was typed
    assert defined.signals(run.id) == []
    sent = client.post(
        f"/runs/{run.id}/signal",
        data={"csrf": csrf, "name": "approve", "payload": '{"ok": true}', "key": "k1"},
        follow_redirects=False,
    )
    assert sent.status_code == 303
    assert [(s["name"], s["payload"], s["key"]) for s in defined.signals(run.id)] == [
        ("approve", {"ok": True}, "k1")
    ]


def test_a_refused_action_names_the_reason(make_client: MakeClient, defined: perdure.App) -> None:
    run = defined.start("approval", {"doc": 5})
    client = make_client()
    answer = client.post(f"/runs/{run.id}/retry", data={"csrf": csrf_of(client)})
    assert answer.status_code == 409 and "retry refused" in answer.text
    assert run.status() == "queued"
    missing = client.get("/runs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404


def test_headers_forbid_inline_scripts_and_framing(make_client: MakeClient) -> None:
    client = make_client()
    page = client.get("/")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert "<script>" not in page.text.replace(
        '<script src="/static/dashboard.js" defer></script>', ""
    )


def test_a_foreign_host_header_is_refused_without_a_token(make_client: MakeClient) -> None:
    client = make_client()
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"host": "evil.example:8080"}).status_code == 400
    assert client.get("/", headers={"host": "127.0.0.1.evil.example"}).status_code == 400
    for host in ("localhost:8080", "127.0.0.2:80", "[::1]:8080", "LOCALHOST"):
        assert client.get("/", headers={"host": host}).status_code == 200, host


def test_user_text_is_escaped_everywhere(
    make_client: MakeClient, defined: perdure.App, workload: Workload
) -> None:
    client = make_client()
    escaped = "&lt;script&gt;window.__pwned = 1&lt;/script&gt;"
    for path in (f"/runs/{workload.scripted}", "/runs", f"/runs/{workload.failed}"):
        page = client.get(path)
        assert SCRIPT not in page.text, path
        assert "<b>gateway</b>" not in page.text, path
    assert escaped in client.get(f"/runs/{workload.scripted}").text
    assert "&lt;b&gt;gateway&lt;/b&gt;" in client.get(f"/runs/{workload.failed}").text


def test_a_payload_nested_too_deep_is_shown_and_nothing_is_sent(
    make_client: MakeClient, defined: perdure.App
) -> None:
    run = defined.start("approval", {"doc": 6})
    client = make_client()
    deep = "[" * 100_000 + "]" * 100_000
    answer = client.post(
        f"/runs/{run.id}/signal",
        data={"csrf": csrf_of(client), "name": "approve", "payload": deep, "key": ""},
    )
    assert answer.status_code == 400
    assert "nested deeper than" in answer.text and "nothing was sent" in answer.text
    assert defined.signals(run.id) == []


@pytest.mark.parametrize("query", ["version=%C2%B2", "limit=%C2%B2", "version=" + "9" * 5000])
def test_a_number_filter_that_is_not_ascii_digits_is_ignored(
    make_client: MakeClient, query: str
) -> None:
    answer = make_client().get(f"/runs?{query}")
    assert answer.status_code == 200
