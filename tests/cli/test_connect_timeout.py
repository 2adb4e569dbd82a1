"""``perdure worker --connect-timeout``: how long a worker waits for its database at start-up."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import psycopg.conninfo

import perdure
from helpers import WorkerProcess, wait_until


class Forwarder:
    """A TCP port that forwards to the test server once ``open()`` is called (refused before)."""

    def __init__(self, pg_url: str) -> None:
        self.target = psycopg.conninfo.conninfo_to_dict(pg_url)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.listener: socket.socket | None = None
        self.sockets: list[socket.socket] = []
        self.url = (
            f"postgresql://{quote(str(self.target.get('user', 'postgres')))}@127.0.0.1:{self.port}"
            f"/{self.target.get('dbname', 'postgres')}"
        )

    def _connect(self) -> socket.socket:
        host = str(self.target.get("host", "127.0.0.1"))
        port = int(self.target.get("port") or 5432)
        if host.startswith("/"):
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(f"{host}/.s.PGSQL.{port}")
            return upstream
        return socket.create_connection((host, port))

    def open(self) -> None:
        """Start accepting connections and forwarding them."""
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.listener is not None
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = self._connect()
                self.sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        """Stop accepting; cut the connections."""
        if self.listener is not None:
            self.listener.close()
        for each in self.sockets:
            each.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def forwarder(pg_url: str) -> Iterator[Forwarder]:
    """A Forwarder, closed after."""
    found = Forwarder(pg_url)
    try:
        yield found
    finally:
        found.close()


def test_a_worker_started_before_its_database_waits_for_it(
    pg_url: str, schema: str, app: perdure.App
) -> None:
    with forwarder(pg_url) as db:
        worker = WorkerProcess.start(
            "apps.cli_app:app", db.url, schema, ["--connect-timeout", "300"], {}
        )
        try:
            wait_until(lambda: "database unreachable" in worker.output(), what="a failed try")
            assert worker.proc.poll() is None
            db.open()
            wait_until(app.workers, timeout=60, what="the worker registered")
            run = app.start("cli_greet", {"name": "late"})
            assert run.result(timeout=60)
        finally:
            worker.kill()


def test_a_worker_gives_up_after_its_connect_timeout(schema: str) -> None:
    with forwarder("postgresql://postgres@127.0.0.1/postgres") as db:
        worker = WorkerProcess.start(
            "apps.cli_app:app", db.url, schema, [], {"PERDURE_CONNECT_TIMEOUT": "0"}
        )
        try:
            assert worker.wait(60) == 1
        finally:
            worker.kill()
        assert "did not accept a connection within 0 s" in worker.output()
