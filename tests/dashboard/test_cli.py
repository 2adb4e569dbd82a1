"""``perdure dashboard`` and ``perdure demo --serve`` as real processes."""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from dashboard.workload import Workload

#: A demo with one worker and two runs takes seconds; the machine is shared.
DEADLINE = 120.0


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    """Read the process's output until a line matches ``pattern``; fail after ``timeout``."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(deadline - time.monotonic(), 0)):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
    raise AssertionError(f"no line matched {pattern!r}; output:\n{''.join(seen)}")


@pytest.fixture
def launch() -> Iterator[object]:
    """Start perdure subprocesses; each is interrupted (then killed) after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PERDURE_DASHBOARD_TOKEN", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "perdure", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def get(url: str) -> str:
    """The body of a GET, as a browser on this machine would ask."""
    request = urllib.request.Request(url, headers={"accept": "text/html"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def test_perdure_dashboard_serves_the_database_and_stops_on_sigint(
    launch: object, pg_url: str, schema: str, workload: Workload
) -> None:
    port = free_port()
    proc = launch(  # type: ignore[operator]
        "--database-url", pg_url, "dashboard", "--schema", schema, "--port", str(port)
    )
    found = wait_for_line(proc, r"perdure dashboard: (http://\S+)", DEADLINE)
    assert found.group(1) == f"http://127.0.0.1:{port}/"
    page = get(f"{found.group(1)}runs?status=failed")
    assert workload.failed in page and workload.flaky in page
    assert workload.graph not in page
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0, proc.stdout.read() if proc.stdout else ""


def test_demo_serve_ends_by_serving_the_dashboard(launch: object, pg_url: str, schema: str) -> None:
    port = free_port()
    proc = launch(  # type: ignore[operator]
        "--database-url",
        pg_url,
        "--schema",
        schema,
        "demo",
        "--runs",
        "2",
        "--workers",
        "1",
        "--no-kill",
        "--serve",
        "--port",
        str(port),
    )
    found = wait_for_line(proc, r"perdure dashboard: (http://\S+)", DEADLINE)
    page = get(f"{found.group(1)}runs")
    assert page.count('data-status="completed"') >= 2
    assert "checkout" in page or "signup" in page or "etl" in page
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


def test_a_read_only_dashboard_shows_no_action_and_refuses_them(
    launch: object, pg_url: str, schema: str, workload: Workload
) -> None:
    port = free_port()
    proc = launch(  # type: ignore[operator]
        "--database-url",
        pg_url,
        "dashboard",
        "--schema",
        schema,
        "--port",
        str(port),
        "--read-only",
    )
    found = wait_for_line(proc, r"perdure dashboard: (http://\S+).*read-only", DEADLINE)
    base = found.group(1)
    page = get(f"{base}runs/{workload.failed}")
    assert workload.failed in page and 'method="post"' not in page
    refused = urllib.request.Request(
        f"{base}runs/{workload.failed}/retry", data=b"csrf=x", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(refused, timeout=10)
    answer.value.close()
    assert answer.value.code == 403
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
