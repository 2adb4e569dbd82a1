"""A primary and a streaming synchronous hot standby of Debian's PostgreSQL 15.

The standby is cloned with pg_basebackup and commits wait for it
(``synchronous_standby_names``), so a commit the primary acknowledged is on
the standby too: promoting it after the primary dies loses nothing. Both
listen on the loopback; :attr:`ReplicatedPair.url` names both hosts with
``target_session_attrs=read-write``, so that clients find whichever is the
primary. Needs root (the servers run as the ``perdure`` account, which the
embedded server also uses) and the postgresql-15 package.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

PG15_BIN = Path(os.environ.get("PERDURE_TEST_PG15_BIN", "/usr/lib/postgresql/15/bin"))
ACCOUNT = "perdure"
STANDBY_NAME = "standby1"


def missing_reason() -> str | None:
    """Why the pair cannot be started here (the test skips with it), or None."""
    if os.geteuid() != 0:
        return "needs root: the primary and standby run as the perdure account"
    if not (PG15_BIN / "pg_basebackup").exists():
        return f"needs Debian's postgresql-15 ({PG15_BIN}/pg_basebackup is missing)"
    return None


@dataclass
class Node:
    """One server of the pair."""

    data: Path
    port: int

    @property
    def url(self) -> str:
        """A URL of this server alone."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


class ReplicatedPair:
    """A primary and its synchronous standby, in a temporary folder."""

    def __init__(self) -> None:
        """Create, start and connect both servers; wait until replication is synchronous."""
        from perdure.store import embedded

        embedded._server_account()  # creates the perdure account when missing
        self.base = Path(tempfile.mkdtemp(prefix="perdure-pair-", dir="/tmp"))
        self.base.chmod(0o755)
        shutil.chown(self.base, ACCOUNT)
        self.primary = Node(self.base / "primary", _free_port())
        self.standby = Node(self.base / "standby", _free_port())
        self._run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust", "-N")
        _append(
            self.primary.data / "postgresql.conf",
            f"port = {self.primary.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.base}'",
            "wal_level = replica",
            "max_wal_senders = 5",
            "max_connections = 200",
            "fsync = off",
            f"synchronous_standby_names = '{STANDBY_NAME}'",
            "hot_standby = on",
            # promoted_at() reads the standby's log: its stamps in UTC.
            "log_timezone = 'UTC'",
            "log_line_prefix = '%m [%p] '",
        )
        self.start(self.primary)
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            str(self.standby.data),
            "-R",
            "-X",
            "stream",
        )
        _append(
            self.standby.data / "postgresql.auto.conf",
            f"port = {self.standby.port}",
            f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} user=postgres "
            f"application_name={STANDBY_NAME}'",
            # Once promoted it has no standby of its own: its commits must not wait for one.
            "synchronous_standby_names = ''",
        )
        self.start(self.standby)
        self.wait_synchronous()

    @property
    def url(self) -> str:
        """Both hosts; connections go to whichever accepts writes."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            "/postgres?target_session_attrs=read-write&connect_timeout=3"
        )

    def start(self, node: Node) -> None:
        """Start ``node`` and wait until it accepts connections."""
        log = self.base / f"{node.data.name}.log"
        self._run("pg_ctl", "-D", str(node.data), "-l", str(log), "-w", "start")

    def stop_immediately(self, node: Node) -> None:
        """Stop ``node`` as a crash would: no shutdown checkpoint, connections cut."""
        self._run("pg_ctl", "-D", str(node.data), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        """Promote the standby and wait until it accepts writes."""
        self._run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")

    def promoted_at(self, timeout: float = 10.0) -> float:
        """When the standby, promoted, began to accept connections (its log's clock, epoch s).

        `pg_ctl promote -w` returns once the server accepts writes, which can be
        a moment before the postmaster has written that line: read the log until
        it has, within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            log = (self.base / f"{self.standby.data.name}.log").read_text()
            ready = [
                line
                for line in log.splitlines()
                if line.endswith("database system is ready to accept connections")
            ]
            if ready:
                break
            if time.monotonic() > deadline:
                raise AssertionError("the standby's log does not tell when it was promoted")
            time.sleep(0.05)
        stamp = datetime.strptime(" ".join(ready[-1].split()[:2]), "%Y-%m-%d %H:%M:%S.%f")
        return stamp.replace(tzinfo=UTC).timestamp()

    def wait_synchronous(self, timeout: float = 60.0) -> None:
        """Wait until the standby streams as the primary's synchronous standby."""
        deadline = time.monotonic() + timeout
        while True:
            with psycopg.connect(self.primary.url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
            if row is not None and row[0] == "sync":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby is not synchronous: {row}")
            time.sleep(0.1)

    def close(self) -> None:
        """Stop both servers and remove the folder."""
        for node in (self.standby, self.primary):
            if (node.data / "postmaster.pid").exists():
                subprocess.run(
                    [
                        "runuser",
                        "-u",
                        ACCOUNT,
                        "--",
                        str(PG15_BIN / "pg_ctl"),
                        "-D",
                        str(node.data),
                        "-m",
                        "immediate",
                        "stop",
                    ],
                    capture_output=True,
                    check=False,
                )
        shutil.rmtree(self.base, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        pwd.getpwnam(ACCOUNT)
        done = subprocess.run(
            ["runuser", "-u", ACCOUNT, "--", str(PG15_BIN / program), *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.base,
        )
        if done.returncode != 0:
            raise AssertionError(f"{program} failed: {done.stdout}{done.stderr}")


def _append(path: Path, *lines: str) -> None:
    with path.open("a") as out:
        out.write("\n".join(lines) + "\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
