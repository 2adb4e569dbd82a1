"""The perdure pytest plugin, registered automatically when perdure is installed.

Fixtures:

- ``perdure_database_url`` (session): ``PERDURE_TEST_DATABASE_URL`` if set, else
  an embedded PostgreSQL started in a temporary directory for the session.
- ``perdure_clock``: a [`VirtualClock`][perdure.VirtualClock] for the test.
- ``perdure_app``: an App on a schema of its own (dropped after the test),
  on ``perdure_clock``. Define workflows on it, start runs, then
  ``perdure.testing.drain(perdure_app)`` or ``perdure_app.run_until_complete(run)``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from perdure.api.app import App
from perdure.clock import VirtualClock
from perdure.store import migrate as migrations


@pytest.fixture(scope="session")
def perdure_database_url() -> Iterator[str]:
    """A PostgreSQL for the test session: the given one, or an embedded one."""
    given = os.environ.get("PERDURE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    from perdure.store import embedded

    os.environ.setdefault("PERDURE_EMBEDDED_FAST", "1")
    base = Path(tempfile.mkdtemp(prefix="perdure-pytest-", dir="/tmp"))
    base.chmod(0o755)
    server = embedded.ensure_server(base / "pg")
    try:
        yield server.url
    finally:
        embedded.stop_server(server.data_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def perdure_clock() -> VirtualClock:
    """A virtual clock: time moves only when the test calls ``advance``."""
    return VirtualClock()


@pytest.fixture
def perdure_app(perdure_database_url: str, perdure_clock: VirtualClock) -> Iterator[App]:
    """An App on a fresh, migrated schema of the test database, on the virtual clock."""
    schema = f"test_{uuid.uuid4().hex[:12]}"
    app = App(perdure_database_url, schema=schema, clock=perdure_clock)
    try:
        # Created here: a test may read (list_runs, get_run) before it writes.
        app.ensure_schema()
        yield app
    finally:
        app.close()
        with psycopg.connect(perdure_database_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)
