"""Debian's PgBouncer in transaction pooling mode, in front of a test's server.

The pooler listens on a free TCP port of the loopback and forwards every
database to the server's Unix socket, with ``pool_size`` server connections at
most: fewer than the workers ask for, so that clients queue for a connection
and each transaction may land on a different one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
#: The account an embedded server runs as when the tests run as root.
SERVER_ACCOUNT = "perdure"


def missing_reason() -> str | None:
    """Why no pooler can be started here, or None."""
    if not Path(PGBOUNCER).exists():
        return (
            "pgbouncer is not installed: `apt-get install pgbouncer` (as .ci/run does) "
            "to run the transaction-pooling tests"
        )
    return None


@dataclass
class Pooler:
    """A running PgBouncer; :meth:`close` stops it and removes its folder."""

    base: Path
    proc: subprocess.Popen[bytes]
    url: str

    @classmethod
    def start(cls, server_url: str, pool_size: int) -> Pooler:
        """A transaction-mode PgBouncer before ``server_url``, ``pool_size`` server connections."""
        target = urlparse(server_url)
        query = {k: v[0] for k, v in parse_qs(target.query).items()}
        host = query.get("host") or target.hostname or "localhost"
        port = query.get("port") or str(target.port or 5432)
        user = target.username or "postgres"
        base = Path(tempfile.mkdtemp(prefix="perdure-pgbouncer-", dir="/tmp"))
        base.chmod(0o755)
        listen = _free_port()
        (base / "users.txt").write_text(f'"{user}" ""\n')
        (base / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={port} user={user}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {listen}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {base / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            f"max_db_connections = {pool_size}\n"
            "max_client_conn = 1000\n"
            "server_reset_query =\n"
            f"admin_users = {user}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {base / 'pgbouncer.log'}\n"
            f"pidfile = {base / 'pgbouncer.pid'}\n"
        )
        args = [PGBOUNCER]
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root.
            pwd.getpwnam(SERVER_ACCOUNT)
            shutil.chown(base, SERVER_ACCOUNT)
            args += ["-u", SERVER_ACCOUNT]
        proc = subprocess.Popen(
            [*args, str(base / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        url = f"postgresql://{user}@127.0.0.1:{listen}/{target.path.lstrip('/') or 'postgres'}"
        pooler = cls(base, proc, url)
        pooler._wait_ready()
        return pooler

    def stop(self) -> None:
        """Stop PgBouncer at once (SIGTERM: an immediate shutdown), keeping its folder."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Start PgBouncer again, on the same port, and wait until it answers."""
        args = [PGBOUNCER]
        if os.geteuid() == 0:
            args += ["-u", SERVER_ACCOUNT]
        self.proc = subprocess.Popen(
            [*args, str(self.base / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    @property
    def admin_url(self) -> str:
        """The URL of PgBouncer's admin console (SHOW STATS, SHOW POOLS)."""
        return self.url.rsplit("/", 1)[0] + "/pgbouncer"

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                    return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"pgbouncer did not start:\n{self.log()}") from None
                time.sleep(0.1)

    def log(self) -> str:
        """What PgBouncer logged so far."""
        path = self.base / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        """Stop PgBouncer and remove its folder."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
