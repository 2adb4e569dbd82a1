"""A Patroni cluster on this machine: one etcd member and three PostgreSQL 15 nodes.

Debian's ``etcd-server``, ``patroni`` and ``postgresql-15``, each node in a
temporary folder with free ports of the loopback. Patroni bootstraps the
first node with initdb and clones the others with pg_basebackup; the cluster's
settings (``bootstrap.dcs``) are the ones docs/operating.md tells users to
run, read from that page (the YAML block marked ``run-by`` this test), so the
page and the test cannot drift apart. What only a test wants (no fsync, the
server's log in a known file with UTC stamps) is set per node.

Every process runs as the ``perdure`` account (PostgreSQL refuses root), and
each Patroni runs below ``subreaper.py``: a postmaster killed with SIGKILL is
reaped, so Patroni sees it gone even where the container's init does not
reap. Needs root.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from deploy.replicated import _free_port
from documentation.blocks import ROOT, blocks

PG15_BIN = Path(os.environ.get("PERDURE_TEST_PG15_BIN", "/usr/lib/postgresql/15/bin"))
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
PATRONICTL = shutil.which("patronictl") or "/usr/bin/patronictl"
ACCOUNT = "perdure"
SCOPE = "perdure-ha"
SUBREAPER = Path(__file__).with_name("subreaper.py")
#: The system's Python runs the subreaper: the account may not read the suite's venv.
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
#: The page whose YAML block gives the cluster's settings.
DOCS_PAGE = ROOT / "docs" / "operating.md"
#: Only the test's own processes' environment: not the suite's PYTHONPATH or coverage.
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def missing_reason() -> str | None:
    """Which package the cluster lacks here (the test fails with it), or None."""
    for path, package in (
        (PG15_BIN / "postgres", "postgresql-15"),
        (Path(ETCD), "etcd-server"),
        (Path(PATRONI), "patroni"),
    ):
        if not path.exists():
            return f"{path} is missing: `apt-get install {package}` (as .ci/run does)"
    return None


def documented_dcs() -> dict[str, Any]:
    """The ``bootstrap.dcs`` settings of the YAML block docs/operating.md gives users."""
    found = [
        b
        for b in blocks(DOCS_PAGE)
        if b.lang == "yaml" and "tests/deploy/test_ha_cluster.py" in b.run_by
    ]
    assert len(found) == 1, f"{DOCS_PAGE} must have one YAML block run by this test"
    settings = yaml.safe_load(found[0].code)
    return dict(settings["bootstrap"]["dcs"])


@dataclass
class Member:
    """One Patroni node and its PostgreSQL server."""

    name: str
    folder: Path
    pg_port: int
    api_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        """The server's data directory."""
        return self.folder / "data"

    @property
    def config(self) -> Path:
        """The node's Patroni configuration."""
        return self.folder / "patroni.yml"

    @property
    def server_log(self) -> Path:
        """The server's own log (``logging_collector``)."""
        return self.folder / "log" / "postgresql.log"

    @property
    def patroni_log(self) -> Path:
        """What Patroni printed."""
        return self.folder / "patroni.log"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's process id, from ``postmaster.pid``; None if none."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid


class PatroniCluster:
    """etcd and three Patroni nodes in a temporary folder, torn down by :meth:`close`."""

    def __init__(self, size: int = 3) -> None:
        """Start etcd and ``size`` nodes; wait for a leader and streaming replicas."""
        from perdure.store import embedded

        embedded._server_account()  # creates the perdure account when missing
        self.base = Path(tempfile.mkdtemp(prefix="perdure-ha-", dir="/tmp"))
        self.base.chmod(0o755)
        shutil.chown(self.base, ACCOUNT)
        self.dcs = documented_dcs()
        self.etcd_port = _free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.members = [
            Member(f"node{i + 1}", self.base / f"node{i + 1}", _free_port(), _free_port())
            for i in range(size)
        ]
        try:
            self._start_etcd()
            for member in self.members:
                self._configure(member)
            # The first node bootstraps the cluster; the others clone it.
            self._start(self.members[0])
            self.wait_healthy(expected=1, timeout=90)
            for member in self.members[1:]:
                self._start(member)
            self.wait_healthy(timeout=120)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """Every node; connections go to whichever accepts writes (the leader)."""
        hosts = ",".join(f"127.0.0.1:{m.pg_port}" for m in self.members)
        return (
            f"postgresql://postgres@{hosts}/postgres"
            "?target_session_attrs=read-write&connect_timeout=3"
        )

    def member(self, name: str) -> Member:
        """The node called ``name``."""
        return next(m for m in self.members if m.name == name)

    def state(self) -> list[dict[str, Any]]:
        """The members as Patroni's REST API reports them (``GET /cluster``)."""
        errors = []
        for member in self.members:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{member.api_port}/cluster", timeout=2
                ) as answer:
                    return list(json.load(answer).get("members", []))
            except OSError as exc:
                errors.append(f"{member.name}: {exc}")
        raise ConnectionError("; ".join(errors))

    def leader(self) -> str | None:
        """The name of the running leader, or None."""
        with contextlib.suppress(ConnectionError):
            for m in self.state():
                if m.get("role") == "leader" and m.get("state") == "running":
                    return str(m["name"])
        return None

    def sync_standby(self) -> str | None:
        """The name of the leader's synchronous standby, or None."""
        with contextlib.suppress(ConnectionError):
            for m in self.state():
                if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming"):
                    return str(m["name"])
        return None

    def wait_healthy(self, expected: int | None = None, timeout: float = 60.0) -> None:
        """Wait until a leader runs, every other node replicates and one is synchronous."""
        expected = len(self.members) if expected is None else expected
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(ConnectionError):
                seen = self.state()
                roles = sorted(m.get("role") for m in seen if m.get("state") in _UP)
                leaders = roles.count("leader")
                if (
                    leaders == 1
                    and len(roles) == expected
                    and (expected == 1 or "sync_standby" in roles)
                ):
                    if all(m.get("lag", 0) != "unknown" for m in seen):
                        return
            time.sleep(0.2)
        raise AssertionError(f"the cluster is not healthy after {timeout} s: {seen}\n{self.logs()}")

    def wait_leader(self, other_than: str, timeout: float = 90.0) -> str:
        """Wait until a node other than ``other_than`` leads and runs; its name."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and leader != other_than:
                return leader
            time.sleep(0.05)
        raise AssertionError(f"no new leader after {timeout} s\n{self.logs()}")

    def switchover(self, leader: str, candidate: str) -> subprocess.Popen[str]:
        """Start ``patronictl switchover --force`` from ``leader`` to ``candidate``."""
        return subprocess.Popen(
            [
                PATRONICTL,
                "-c",
                str(self.members[0].config),
                "switchover",
                "--leader",
                leader,
                "--candidate",
                candidate,
                "--force",
                SCOPE,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**ENV, "HOME": str(self.base)},
        )

    def kill_postmaster(self, name: str) -> int:
        """SIGKILL the postmaster of node ``name`` (its backends are left to notice); its pid."""
        pid = self.member(name).postmaster_pid()
        assert pid is not None, f"{name} runs no postmaster"
        os.kill(pid, signal.SIGKILL)
        return pid

    def promoted_at(self, name: str, after: float, timeout: float = 30.0) -> float:
        """When node ``name`` began to accept writes after ``after`` (its log, epoch s)."""
        return self.logged_at(
            name, "database system is ready to accept connections", after, timeout
        )

    def logged_at(self, name: str, message: str, after: float, timeout: float = 30.0) -> float:
        """When node ``name``'s server first logged ``message`` after ``after`` (epoch s).

        Patroni may report a change a moment before the server has written
        its line: read the log until it has, within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            stamps = [
                _stamp(line)
                for line in _lines(self.member(name).server_log)
                if line.endswith(message)
            ]
            later = [s for s in stamps if s > after]
            if later:
                return later[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}'s log has no {message!r} after {after}")
            time.sleep(0.05)

    def logs(self, tail: int = 3000) -> str:
        """The end of every node's Patroni and server logs, for a failure's message."""
        parts = []
        for member in self.members:
            for path in (member.patroni_log, member.server_log):
                text = "\n".join(_lines(path))
                parts.append(f"--- {path.relative_to(self.base)} ---\n{text[-tail:]}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop every node and etcd at once (the data is thrown away), then remove the folder."""
        for member in self.members:
            if member.process is not None and member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
            pid = member.postmaster_pid()
            if pid is not None:  # an immediate shutdown: Patroni need not wait for a clean one
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)
        for member in self.members:
            if member.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    member.process.wait(timeout=20)
            pid = member.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if member.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    member.process.wait(timeout=10)
                if member.process.poll() is None:
                    member.process.kill()
                    member.process.wait(timeout=10)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{_free_port()}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        folder = self.base / "etcd"
        folder.mkdir(mode=0o700)
        shutil.chown(folder, ACCOUNT)
        with open(self.base / "etcd.log", "wb") as log:
            self.etcd = subprocess.Popen(
                [
                    ETCD,
                    "--name",
                    "etcd1",
                    "--data-dir",
                    str(folder / "data"),
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--initial-cluster",
                    f"etcd1={peer}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**ENV, "HOME": str(folder)},
                cwd=folder,
                **_as_account(),
            )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{client}/health", timeout=2) as answer:
                    if json.load(answer).get("health") == "true":
                        return
            if self.etcd.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"etcd did not start: {(self.base / 'etcd.log').read_text()}")
            time.sleep(0.1)

    def _configure(self, member: Member) -> None:
        member.folder.mkdir(mode=0o700)
        (member.folder / "log").mkdir(mode=0o700)
        for path in (member.folder, member.folder / "log"):
            shutil.chown(path, ACCOUNT)
        address = f"127.0.0.1:{member.pg_port}"
        config = {
            "scope": SCOPE,
            "name": member.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{member.api_port}",
                "connect_address": f"127.0.0.1:{member.api_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": copy.deepcopy(self.dcs),
                "initdb": [{"encoding": "UTF8"}, "no-sync"],
            },
            "postgresql": {
                "listen": address,
                "connect_address": address,
                "data_dir": str(member.data),
                "bin_dir": str(PG15_BIN),
                "pgpass": str(member.folder / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                # This test's own: no fsync (no machine crash here), the
                # socket in the node's folder, and the log in a known file
                # with UTC stamps (promoted_at reads it).
                "parameters": {
                    "fsync": "off",
                    "unix_socket_directories": str(member.folder),
                    "logging_collector": "on",
                    "log_directory": str(member.folder / "log"),
                    "log_filename": "postgresql.log",
                    "log_timezone": "UTC",
                    "log_line_prefix": "%m [%p] ",
                },
            },
            "watchdog": {"mode": "off"},
        }
        member.config.write_text(json.dumps(config, indent=2))  # JSON is YAML
        shutil.chown(member.config, ACCOUNT)

    def _start(self, member: Member) -> None:
        with open(member.patroni_log, "wb") as log:
            member.process = subprocess.Popen(
                [PYTHON, str(SUBREAPER), PATRONI, str(member.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**ENV, "HOME": str(member.folder)},
                cwd=member.folder,
                **_as_account(),
            )


#: Member states of a node that is up (Patroni 3.0 says running; later ones, streaming).
_UP = ("running", "streaming")


def _as_account() -> dict[str, Any]:
    account = pwd.getpwnam(ACCOUNT)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def _stamp(line: str) -> float:
    stamp = datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S.%f")
    return stamp.replace(tzinfo=UTC).timestamp()
