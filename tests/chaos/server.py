"""A PostgreSQL server of the test's own, which it may stop, restart or fill.

The chaos tests restart the server under running workers, so they cannot share
the suite's server: each starts an embedded one (perdure.store.embedded) in a
temporary folder, as tests/conftest.py does for the suite.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from perdure.store import embedded


@dataclass
class OwnServer:
    """An embedded PostgreSQL in a temporary folder; :meth:`close` removes it."""

    base: Path
    max_connections: int
    url: str = ""
    #: (stopped at, started again at), wall-clock seconds, one pair per restart.
    restarts: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def create(cls, max_connections: int = 200) -> OwnServer:
        """Initialise and start a new server."""
        os.environ.setdefault("PERDURE_EMBEDDED_FAST", "1")
        base = Path(tempfile.mkdtemp(prefix="perdure-chaos-", dir="/tmp"))
        # As root, the server runs as the `perdure` account, which must enter it.
        base.chmod(0o755)
        server = cls(base, max_connections)
        server.start()
        return server

    @property
    def data_dir(self) -> Path:
        """The cluster's data folder."""
        return self.base / "pg"

    def start(self) -> None:
        """Start the server (a no-op if it runs); the URL stays the same across restarts."""
        running = embedded.ensure_server(self.data_dir, max_connections=self.max_connections)
        self.url = running.url

    def stop(self) -> None:
        """Fast shutdown: open transactions roll back, every connection is closed."""
        embedded.stop_server(self.data_dir)

    def restart(self, down_seconds: float) -> tuple[float, float]:
        """Stop, stay down ``down_seconds``, start; when it went down and came back."""
        went_down = time.time()
        self.stop()
        time.sleep(down_seconds)
        self.start()
        came_back = time.time()
        self.restarts.append((went_down, came_back))
        return went_down, came_back

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new autocommit connection."""
        return psycopg.connect(self.url, autocommit=True)

    def close(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
