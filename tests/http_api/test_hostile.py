"""Hostile requests are refused cheaply: each attack is one test asserting its refusal."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

import perdure
from http_api.conftest import Served
from perdure.dashboard.api.limits import MAX_BODY_DEPTH
from perdure.engine.serialization import MAX_DEPTH

API = "/api/v1"
MIB = 1024 * 1024


def problem_of(response: httpx.Response) -> dict[str, object]:
    """The problem document of a refused call (its media type checked)."""
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    return body


def connect(served: Served) -> socket.socket:
    """A TCP connection to the served API."""
    where = urlsplit(served.url)
    sock = socket.create_connection((where.hostname, where.port), timeout=30)
    return sock


def status_line(sock: socket.socket) -> bytes:
    """The status line of the answer on ``sock``."""
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer.split(b"\r\n", 1)[0]


def head(length: int | None) -> bytes:
    """The head of a start whose body has ``length`` bytes (None: chunked)."""
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    return (
        f"POST {API}/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\n{framing}\r\n\r\n"
    ).encode()


def test_an_honest_content_length_over_the_limit_is_refused_before_the_body_is_read(
    served: Served,
) -> None:
    # Only the head is sent: the answer comes without waiting for one byte of the body.
    with connect(served) as sock:
        sock.sendall(head(50 * MIB))
        assert status_line(sock) == b"HTTP/1.1 413 Request Entity Too Large"


def test_a_chunked_body_over_the_limit_is_refused(served: Served) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"workflow": "echo", "input": "'
        for _ in range(3):
            yield b"x" * MIB
        yield b'"}'

    answer = httpx.post(
        f"{served.url}{API}/runs",
        content=chunks(),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 413
    assert problem_of(answer)["code"] == "body-too-large"


def _send_big(served: Served, chunked: bool, statuses: list[bytes]) -> None:
    size = 50 * MIB
    block = b"x" * MIB
    with connect(served) as sock:
        try:
            sock.sendall(head(None if chunked else size))
            for _ in range(size // MIB):
                if chunked:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
                else:
                    sock.sendall(block)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server may close once it has answered
        statuses.append(status_line(sock))


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_memory_stays_bounded_with_8_concurrent_50_mib_bodies(
    served: Served, chunked: bool
) -> None:
    warm = httpx.get(f"{served.url}{API}/runs", timeout=30)
    assert warm.status_code == 200
    before = served.rss_kib("VmHWM")
    statuses: list[bytes] = []
    threads = [
        threading.Thread(target=_send_big, args=(served, chunked, statuses)) for _ in range(8)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - started
    peak = served.rss_kib("VmHWM")
    print(f"peak RSS {before / 1024:.0f} -> {peak / 1024:.0f} MiB in {elapsed:.1f} s")
    assert statuses == [b"HTTP/1.1 413 Request Entity Too Large"] * 8
    assert (peak - before) / 1024 < 100, f"the server grew by {(peak - before) / 1024:.0f} MiB"


def test_json_nested_100000_deep_is_a_400_problem(client: TestClient) -> None:
    body = '{"workflow": "echo", "input": ' + "[" * 100_000 + "]" * 100_000 + "}"
    answer = client.post(f"{API}/runs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert problem_of(answer)["code"] == "too-deep"


def test_json_as_deep_as_a_payload_may_be_is_accepted(
    client: TestClient, defined: perdure.App
) -> None:
    deep: object = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    body = json.dumps({"workflow": "echo", "input": deep})
    assert MAX_BODY_DEPTH == MAX_DEPTH + 1
    answer = client.post(f"{API}/runs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 201
    too_deep = json.dumps({"workflow": "echo", "input": [deep]})
    refused = client.post(
        f"{API}/runs", content=too_deep, headers={"content-type": "application/json"}
    )
    assert (refused.status_code, problem_of(refused)["code"]) == (400, "too-deep")
    assert len(defined.list_runs()) == 1


def test_brackets_inside_strings_do_not_count_as_depth(client: TestClient) -> None:
    text = '"[{' * 1000 + '\\"[['
    answer = client.post(f"{API}/runs", json={"workflow": "echo", "input": text})
    assert answer.status_code == 201
    assert answer.json()["input"] == text


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/runs/x/streams/words", {"Last-Event-ID": "²".encode("latin-1")}),
        ("/runs/x/streams/words", {"Last-Event-ID": "1 "}),
        ("/runs/x/streams/words?after=%D9%A1", {}),
        ("/runs?limit=%C2%B2", {}),
        ("/runs?version=1e3", {}),
        ("/runs?limit=99999999999999999999999", {}),
        ("/runs/x/result?timeout=%D9%A1", {}),
        ("/runs/x/result?timeout=nan", {}),
        ("/runs/x/events/e?timeout=1_0", {}),
    ],
    ids=[
        "last-event-id-superscript",
        "last-event-id-space",
        "after-arabic-digit",
        "limit-superscript",
        "version-exponent",
        "limit-huge",
        "timeout-arabic-digit",
        "timeout-nan",
        "timeout-underscore",
    ],
)
def test_a_number_that_is_not_ascii_digits_is_a_400(
    client: TestClient, path: str, headers: dict[str, str | bytes]
) -> None:
    client.post(f"{API}/runs", json={"workflow": "chat", "key": "x"})
    answer = client.get(f"{API}{path}", headers=headers)
    assert answer.status_code == 400
    assert problem_of(answer)["code"] in ("invalid-argument", "invalid-header")


@pytest.mark.parametrize(
    "headers",
    [
        {"Idempotency-Key": "k" * 513},
        {"Idempotency-Key": "tab\tinside"},
        {"Idempotency-Key": " padded"},
        {"Idempotency-Key": "café".encode("latin-1")},
        {"Content-Type": "application json"},
        {"Content-Type": "application/json; charset"},
        {"Content-Length": "²".encode("latin-1")},
    ],
    ids=[
        "key-too-long",
        "key-control",
        "key-space",
        "key-latin1",
        "type-no-slash",
        "type-bad-parameter",
        "length-superscript",
    ],
)
def test_a_malformed_header_is_a_400(
    client: TestClient, defined: perdure.App, headers: dict[str, str | bytes]
) -> None:
    body = b'{"workflow": "echo"}'
    sent: dict[str, str | bytes] = {"content-type": "application/json"}
    sent.update({name.lower(): value for name, value in headers.items()})
    request = client.build_request("POST", f"{API}/runs", content=body, headers=sent)
    answer = client.send(request)
    assert answer.status_code == 400
    assert problem_of(answer)["code"] == "invalid-header"
    assert len(defined.list_runs()) == 0


def test_a_body_in_another_charset_is_a_415(client: TestClient) -> None:
    body = '{"workflow": "echo"}'.encode("utf-16")
    answer = client.post(
        f"{API}/runs", content=body, headers={"content-type": "application/json; charset=utf-16"}
    )
    assert (answer.status_code, problem_of(answer)["code"]) == (415, "unsupported-media-type")


def test_a_start_key_reused_with_another_input_is_a_409(
    client: TestClient, defined: perdure.App
) -> None:
    first = {"workflow": "echo", "input": {"amount": 10, "items": [1.5, True]}}
    made = client.post(f"{API}/runs", json=first, headers={"Idempotency-Key": "order-7"})
    assert made.status_code == 201
    again = client.post(f"{API}/runs", json=first, headers={"Idempotency-Key": "order-7"})
    assert (again.status_code, again.json()) == (200, made.json())
    for other in ({"amount": 11, "items": [1.5, True]}, {"amount": 10, "items": [1.5, 1]}, None):
        reused = client.post(
            f"{API}/runs",
            json={"workflow": "echo", "input": other},
            headers={"Idempotency-Key": "order-7"},
        )
        assert reused.status_code == 409
        assert problem_of(reused)["code"] == "idempotency-key-reused"
    by_field = client.post(f"{API}/runs", json={**first, "input": 3, "key": "order-7"})
    assert problem_of(by_field)["code"] == "idempotency-key-reused"
    other_workflow = client.post(
        f"{API}/runs", json={"workflow": "chat"}, headers={"Idempotency-Key": "order-7"}
    )
    assert (other_workflow.status_code, problem_of(other_workflow)["code"]) == (
        409,
        "key-conflict",
    )
    runs = defined.list_runs()
    assert [(r.key, r.input) for r in runs] == [("order-7", first["input"])]


def test_a_signal_key_reused_with_another_name_or_payload_is_a_409(
    client: TestClient, defined: perdure.App
) -> None:
    run = client.post(f"{API}/runs", json={"workflow": "chat"}).json()["id"]
    first = {"name": "reply", "payload": {"text": "yes"}, "key": "answer-1"}
    sent = client.post(f"{API}/runs/{run}/signals", json=first)
    assert sent.status_code == 202
    again = client.post(f"{API}/runs/{run}/signals", json=first)
    assert (again.status_code, again.json()) == (202, sent.json())
    for other in ({**first, "name": "other"}, {**first, "payload": {"text": "no"}}):
        reused = client.post(f"{API}/runs/{run}/signals", json=other)
        assert reused.status_code == 409
        assert problem_of(reused)["code"] == "idempotency-key-reused"
    stored = defined.signals(run)
    assert [(s["name"], s["payload"], s["key"]) for s in stored] == [
        ("reply", {"text": "yes"}, "answer-1")
    ]
