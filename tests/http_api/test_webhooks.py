"""Events in over HTTP: POST /api/v1/events and signed webhooks at /api/v1/webhooks/{source}.

Every attack is one test asserting the refusal and that nothing was written.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

import perdure
from helpers import wait_until
from http_api.conftest import MakeClient
from perdure.dashboard.api.openapi import DOCUMENT
from perdure.dashboard.hooks_config import WebhookSource, parse
from perdure.dashboard.roles import NamedToken

GITHUB_SECRET = "github-webhook-secret-0123456789"
STRIPE_SECRET = "whsec_stripe-webhook-secret-0123"
OPERATOR = "operator-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdefgh"
SOURCES = (
    WebhookSource("github", "github", GITHUB_SECRET, "github.{X-GitHub-Event}"),
    WebhookSource("stripe", "stripe", STRIPE_SECRET, "stripe.{type}"),
)
PUSH = {"ref": "refs/heads/main", "repository": {"full_name": "acme/shop"}}


@pytest.fixture
def hooks(make_client: MakeClient) -> TestClient:
    """The dashboard with the GitHub and Stripe sources and two named tokens."""
    tokens = (NamedToken.of("otto", "operator", OPERATOR), NamedToken.of("vera", "viewer", VIEWER))
    return make_client(webhooks=SOURCES, tokens=tokens)


def github_headers(body: bytes, delivery: str, secret: str = GITHUB_SECRET) -> dict[str, str]:
    """The headers GitHub sends with a push delivery signed by ``secret``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/json",
        "x-github-event": "push",
        "x-github-delivery": delivery,
        "x-hub-signature-256": f"sha256={digest}",
    }


def stripe_headers(
    body: bytes, stamp: int | None = None, secret: str = STRIPE_SECRET
) -> dict[str, str]:
    """The headers Stripe sends with an event signed by ``secret`` at ``stamp``."""
    stamp = int(time.time()) if stamp is None else stamp
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {"content-type": "application/json", "stripe-signature": f"t={stamp},v1={digest}"}


def stripe_event(event_id: str = "evt_1") -> bytes:
    """A Stripe event's body."""
    return json.dumps(
        {"id": event_id, "type": "invoice.paid", "data": {"object": {"id": "in_9182"}}}
    ).encode()


def nothing_written(app: perdure.App) -> None:
    """No event recorded, no run started."""
    assert app.emitted_events() == []
    assert list(app.list_runs(workflow="build")) == []


def test_github_delivery_emits_once_and_a_replay_records_nothing(
    hooks: TestClient, defined: perdure.App
) -> None:
    body = json.dumps(PUSH).encode()
    first = hooks.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, "d-1"))
    assert first.status_code == 201, first.text
    assert first.json()["name"] == "github.push" and first.json()["key"] == "d-1"
    again = hooks.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, "d-1"))
    assert again.status_code == 200
    assert again.json()["event_id"] == first.json()["event_id"]
    assert again.json()["created"] is False
    (recorded,) = defined.emitted_events()
    assert recorded["event"].payload == PUSH and recorded["event"].key == "d-1"
    entries = defined.audit_log(actor="webhook:github")
    assert [e.outcome for e in entries] == ["ok", "ok"]


def test_bad_github_signature_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    body = json.dumps(PUSH).encode()
    headers = github_headers(body, "d-2", secret="another-secret-0123456789abcdef")
    answer = hooks.post("/api/v1/webhooks/github", content=body, headers=headers)
    assert answer.status_code == 401
    assert answer.json()["code"] == "bad-signature"
    nothing_written(defined)
    (entry,) = defined.audit_log(actor="webhook:github")
    assert entry.outcome == "refused"


def test_missing_github_signature_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    body = json.dumps(PUSH).encode()
    headers = github_headers(body, "d-3")
    del headers["x-hub-signature-256"]
    answer = hooks.post("/api/v1/webhooks/github", content=body, headers=headers)
    assert answer.status_code == 401
    nothing_written(defined)


def test_body_altered_after_signing_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    body = json.dumps(PUSH).encode()
    headers = github_headers(body, "d-4")
    altered = body.replace(b"main", b"evil")
    answer = hooks.post("/api/v1/webhooks/github", content=altered, headers=headers)
    assert answer.status_code == 401
    nothing_written(defined)


def test_stripe_delivery_is_emitted(hooks: TestClient, defined: perdure.App) -> None:
    body = stripe_event("evt_7")
    answer = hooks.post("/api/v1/webhooks/stripe", content=body, headers=stripe_headers(body))
    assert answer.status_code == 201, answer.text
    (recorded,) = defined.emitted_events()
    assert recorded["event"].name == "stripe.invoice.paid"
    assert recorded["event"].key == "evt_7"


def test_stripe_signature_with_a_second_v1_is_accepted(
    hooks: TestClient, defined: perdure.App
) -> None:
    body = stripe_event("evt_8")
    headers = stripe_headers(body)
    stamp, good = headers["stripe-signature"].split(",")
    headers["stripe-signature"] = f"{stamp},v1={'0' * 64},{good}"
    answer = hooks.post("/api/v1/webhooks/stripe", content=body, headers=headers)
    assert answer.status_code == 201, answer.text


def test_stripe_timestamp_outside_the_tolerance_is_refused(
    hooks: TestClient, defined: perdure.App
) -> None:
    body = stripe_event()
    headers = stripe_headers(body, stamp=int(time.time()) - 301)
    answer = hooks.post("/api/v1/webhooks/stripe", content=body, headers=headers)
    assert answer.status_code == 401
    assert "timestamp" in answer.json()["detail"]
    nothing_written(defined)


def test_stripe_with_a_wrong_secret_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    body = stripe_event()
    headers = stripe_headers(body, secret="whsec_not-the-right-secret-000")
    answer = hooks.post("/api/v1/webhooks/stripe", content=body, headers=headers)
    assert answer.status_code == 401
    nothing_written(defined)


def test_unknown_source_is_not_found_without_naming_the_others(
    hooks: TestClient, defined: perdure.App
) -> None:
    body = json.dumps(PUSH).encode()
    answer = hooks.post("/api/v1/webhooks/gitlab", content=body, headers=github_headers(body, "x"))
    assert answer.status_code == 404
    assert "github" not in answer.text and "stripe" not in answer.text
    nothing_written(defined)


def test_oversized_webhook_body_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    body = json.dumps({"blob": "x" * (1024 * 1024)}).encode()
    answer = hooks.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, "b"))
    assert answer.status_code == 413
    nothing_written(defined)


def test_same_delivery_twice_starts_one_triggered_run(
    hooks: TestClient, defined: perdure.App
) -> None:
    @defined.workflow("build", on_event="github.push")
    async def build(ctx: perdure.Context, push: dict[str, Any]) -> str:
        return str(push["ref"])

    defined.register()
    body = json.dumps(PUSH).encode()
    for _ in range(2):
        answer = hooks.post(
            "/api/v1/webhooks/github", content=body, headers=github_headers(body, "d-9")
        )
        assert answer.status_code in (200, 201)
    (run,) = defined.list_runs(workflow="build")
    assert run.input == PUSH


def test_emit_by_an_operator_then_again_with_its_key(
    hooks: TestClient, defined: perdure.App
) -> None:
    auth = {"authorization": f"Bearer {OPERATOR}"}
    sent = {"name": "order.paid", "payload": {"order_id": 9182}, "key": "k-1"}
    first = hooks.post("/api/v1/events", json=sent, headers=auth)
    assert first.status_code == 201, first.text
    again = hooks.post("/api/v1/events", json=sent, headers=auth)
    assert again.status_code == 200
    assert again.json()["event_id"] == first.json()["event_id"]
    (recorded,) = defined.emitted_events()
    assert recorded["event"].payload == {"order_id": 9182}


def test_emit_an_array_by_an_operator_then_again_with_its_keys(
    hooks: TestClient, defined: perdure.App
) -> None:
    auth = {"authorization": f"Bearer {OPERATOR}"}
    sent = [
        {"name": "order.paid", "payload": {"order_id": 1}, "key": "a-1"},
        {"name": "order.paid", "payload": {"order_id": 2}},
        {"name": "order.shipped", "payload": {"order_id": 1}, "key": "a-1"},
    ]
    first = hooks.post("/api/v1/events", json=sent, headers=auth)
    assert first.status_code == 201, first.text
    answers = first.json()
    assert [a["name"] for a in answers] == ["order.paid", "order.paid", "order.shipped"]
    assert [a["key"] for a in answers] == ["a-1", None, "a-1"]
    assert all(a["created"] for a in answers)
    ids = [a["event_id"] for a in answers]
    assert ids == sorted(ids) and len(set(ids)) == 3
    # Again with the keyed ones only: nothing recorded, the first ids answered.
    again = hooks.post("/api/v1/events", json=[sent[0], sent[2]], headers=auth)
    assert again.status_code == 200, again.text
    assert [a["event_id"] for a in again.json()] == [ids[0], ids[2]]
    assert [a["created"] for a in again.json()] == [False, False]
    # One new event among replays: 201, and only it recorded.
    mixed = hooks.post(
        "/api/v1/events", json=[sent[0], {"name": "order.paid", "key": "a-2"}], headers=auth
    )
    assert mixed.status_code == 201
    assert [a["created"] for a in mixed.json()] == [False, True]
    assert len(defined.emitted_events()) == 4


@pytest.mark.parametrize(
    ("sent", "detail"),
    [
        ([], "no event"),
        ([{"name": "order.paid"}, "order.paid"], "event 1: not a JSON object"),
        ([{"name": "order.paid"}, {"payload": {}}], "event 1: 'name' is required"),
        ([{"name": "order.paid", "extra": 1}], "event 0: unknown fields: extra"),
        ([{"name": "order.paid", "key": 7}], "event 0: 'key' has the wrong JSON type"),
        ([{"name": "order.paid"}, {"name": "bad name!"}], "event 1"),
        ([{"name": "order.paid"}] * 10_001, "at most 10000"),
        ("order.paid", "a JSON object or an array"),
    ],
)
def test_a_bad_event_in_an_array_writes_nothing(
    hooks: TestClient, defined: perdure.App, sent: Any, detail: str
) -> None:
    auth = {"authorization": f"Bearer {OPERATOR}"}
    answer = hooks.post("/api/v1/events", json=sent, headers=auth)
    assert answer.status_code == 400, answer.text
    assert detail in answer.json()["detail"]
    assert defined.emitted_events() == []


def test_an_array_by_a_viewer_is_forbidden(hooks: TestClient, defined: perdure.App) -> None:
    sent = [{"name": "order.paid", "payload": {"order_id": 9182}}]
    answer = hooks.post("/api/v1/events", json=sent, headers={"authorization": f"Bearer {VIEWER}"})
    assert answer.status_code == 403
    assert defined.emitted_events() == []


def test_emit_by_a_viewer_is_forbidden(hooks: TestClient, defined: perdure.App) -> None:
    sent = {"name": "order.paid", "payload": {"order_id": 9182}}
    answer = hooks.post("/api/v1/events", json=sent, headers={"authorization": f"Bearer {VIEWER}"})
    assert answer.status_code == 403
    assert defined.emitted_events() == []


def test_emit_without_a_token_is_unauthorized(hooks: TestClient, defined: perdure.App) -> None:
    answer = hooks.post("/api/v1/events", json={"name": "order.paid"})
    assert answer.status_code == 401
    assert defined.emitted_events() == []


def test_token_source_refuses_another_token(make_client: MakeClient, defined: perdure.App) -> None:
    source = WebhookSource("ci", "token", "ci-source-token-0123456789", "ci.done")
    client = make_client(webhooks=(source,))
    wrong = {"authorization": "Bearer not-the-source-token-000"}
    answer = client.post("/api/v1/webhooks/ci", json={"ok": True}, headers=wrong)
    assert answer.status_code == 401
    assert defined.emitted_events() == []
    right = {"authorization": "Bearer ci-source-token-0123456789", "x-webhook-id": "b-1"}
    assert client.post("/api/v1/webhooks/ci", json={"ok": True}, headers=right).status_code == 201


def test_openapi_documents_both_endpoints() -> None:
    paths = DOCUMENT["paths"]
    assert {"201", "200", "401", "403"} <= set(paths["/events"]["post"]["responses"])
    hook = paths["/webhooks/{source}"]["post"]
    assert {"201", "200", "401", "404", "413"} <= set(hook["responses"])
    assert hook["security"] == []


def test_perdure_api_serves_the_sources_of_its_webhooks_file(
    defined: perdure.App, pg_url: str, schema: str, tmp_path: Path
) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text(f'[github]\nkind = "github"\nsecret = "{GITHUB_SECRET}"\n')
    env = {**os.environ, "PERDURE_DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema}
    log = tmp_path / "api.log"
    command = [sys.executable, "-m", "perdure", "api", "--port", "0", "--webhooks-file", str(path)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:

        def announced() -> re.Match[str] | None:
            assert proc.poll() is None, f"perdure api exited: {log.read_text()}"
            return re.search(r"perdure api: (http://\S+?)/api/v1/", log.read_text())

        url = wait_until(announced, timeout=30, what="perdure api to listen").group(1)
        body = json.dumps(PUSH).encode()
        answer = httpx.post(
            f"{url}/api/v1/webhooks/github", content=body, headers=github_headers(body, "p-1")
        )
        assert answer.status_code == 201, answer.text
        (recorded,) = defined.emitted_events()
        assert recorded["event"].name == "github.push"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(perdure.ConfigurationError, match="secret"):
        parse({"github": {"kind": "github", "secret": "short"}}, "test")


def test_hmac_source_checks_its_header(make_client: MakeClient, defined: perdure.App) -> None:
    secret = "billing-hmac-secret-0123456789"
    source = WebhookSource("billing", "hmac", secret, "billing.{kind}")
    client = make_client(webhooks=(source,))
    body = json.dumps({"kind": "refund", "amount": 3}).encode()
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "x-webhook-id": "r-1"}
    forged = {**headers, "x-signature-256": "0" * 64}
    assert client.post("/api/v1/webhooks/billing", content=body, headers=forged).status_code == 401
    assert defined.emitted_events() == []
    signed = {**headers, "x-signature-256": f"sha256={digest}"}
    answer = client.post("/api/v1/webhooks/billing", content=body, headers=signed)
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == "billing.refund"


def test_read_only_server_refuses_webhooks(make_client: MakeClient, defined: perdure.App) -> None:
    client = make_client(webhooks=SOURCES, read_only=True)
    body = json.dumps(PUSH).encode()
    answer = client.post(
        "/api/v1/webhooks/github", content=body, headers=github_headers(body, "ro-1")
    )
    assert answer.status_code == 403
    assert defined.emitted_events() == []


def test_oversized_chunked_webhook_body_is_refused(hooks: TestClient, defined: perdure.App) -> None:
    def chunks() -> Any:
        for _ in range(17):
            yield b"x" * 65536

    headers = github_headers(b"", "c-1")
    answer = hooks.post("/api/v1/webhooks/github", content=chunks(), headers=headers)
    assert answer.status_code == 413
    nothing_written(defined)


def test_replayed_stripe_event_answers_the_same_id(hooks: TestClient, defined: perdure.App) -> None:
    body = stripe_event("evt_replayed")
    first = hooks.post("/api/v1/webhooks/stripe", content=body, headers=stripe_headers(body))
    # A replay signed again later (Stripe retries with a new timestamp) is the same event.
    again = hooks.post(
        "/api/v1/webhooks/stripe", content=body, headers=stripe_headers(body, int(time.time()) + 1)
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["event_id"] == first.json()["event_id"]
    assert len(defined.emitted_events()) == 1
