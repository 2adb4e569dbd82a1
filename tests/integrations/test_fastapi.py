"""The FastAPI example with its agent (docs/examples/fastapi_agent_app.py) served by uvicorn.

A real HTTP client talks to it: runs started from handlers (200 or 202),
their state, their streams as Server-Sent Events, an approval arriving over
HTTP, and perdure's errors as HTTP statuses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from helpers import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(pg_url: str, schema: str, tmp_path: Path) -> Iterator[httpx.Client]:
    """uvicorn serving the example on a free port; a client for it."""
    port = _free_port()
    env = dict(os.environ, PERDURE_DATABASE_URL=pg_url, PERDURE_SCHEMA=schema)
    log = tmp_path / "uvicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "fastapi_agent_app:api", "--port", str(port)],
            cwd=EXAMPLES,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"{base}/docs", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, 60, what="uvicorn to serve")
        with httpx.Client(base_url=base, timeout=30) as client:
            yield client
    finally:
        proc.terminate()
        # uvicorn shuts down gracefully, then ends by the signal it was sent.
        assert proc.wait(timeout=30) in (0, -15), log.read_text()
        assert "Application shutdown complete" in log.read_text(), log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()


def _events(client: httpx.Client, url: str, stop: str | None = None) -> list[Any]:
    """The ``data`` of each Server-Sent Event at ``url``, until ``end`` (or an event ``stop``)."""
    values: list[Any] = []
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line == "event: end":
                break
            if line.startswith("data: "):
                values.append(json.loads(line.removeprefix("data: ")))
                if stop is not None and values[-1].get("event") == stop:
                    break
    return values


def test_a_handler_waits_for_the_result_or_answers_202_with_a_status_url(
    server: httpx.Client,
) -> None:
    done = server.post("/reports", params={"n": 4, "wait": 30})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed"
    assert done.json()["output"] == {"total": 10}

    accepted = server.post("/reports", params={"n": 3})
    assert accepted.status_code == 202, accepted.text
    url = accepted.headers["location"]
    assert url == accepted.json()["url"] and url.endswith(f"/runs/{accepted.json()['id']}")
    final = wait_until(
        lambda: (r := server.get(url).json())["status"] == "completed" and r, 30, what="the run"
    )
    assert final["output"] == {"total": 6}
    # The run's stream, served as Server-Sent Events, in order.
    assert _events(server, f"{url}/streams/progress") == [
        {"i": 1, "total": 1},
        {"i": 2, "total": 3},
        {"i": 3, "total": 6},
    ]


def test_an_agent_waits_for_approval_sent_over_http(server: httpx.Client) -> None:
    accepted = server.post("/assistant", params={"prompt": "Send 40 to Ada"})
    assert accepted.status_code == 202, accepted.text
    url = accepted.headers["location"]
    events = _events(server, f"{url}/streams/events", stop="approval_requested")
    assert [e["event"] for e in events] == ["model_response", "approval_requested"]
    assert events[-1]["approvals"] == [
        {"id": "transfer-1", "tool": "transfer", "args": {"amount": 40}}
    ]
    # It waits for the signal without holding a worker.
    wait_until(lambda: server.get(url).json()["status"] == "waiting", 30, what="the wait")

    signal = server.post(
        f"{url}/signals/approval", json={"approvals": {"transfer-1": True}}, params={"key": "ok-1"}
    )
    assert signal.status_code == 202, signal.text
    final = wait_until(
        lambda: (r := server.get(url).json())["status"] == "completed" and r, 30, what="the run"
    )
    assert final["output"]["output"] == "Done: sent 40"
    rest = _events(server, f"{url}/streams/events")
    assert [e["event"] for e in rest][-1] == "output"


def test_perdure_errors_become_http_statuses(server: httpx.Client) -> None:
    missing = server.get("/runs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert missing.json()["error"] == "RunNotFound"
    done = server.post("/reports", params={"n": 1, "wait": 30}).json()
    assert server.post(f"/runs/{done['id']}/cancel").status_code == 409  # already finished
    assert server.post(f"/runs/{done['id']}/signals/late", json=1).status_code == 409
