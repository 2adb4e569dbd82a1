"""Shared fixtures: a real PostgreSQL for the session, a fresh schema per test.

The suite starts its own embedded PostgreSQL in a temporary directory unless
PERDURE_TEST_DATABASE_URL points at a server. Each test gets its own schema
(perdure's schema name is configurable), dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import perdure
from helpers import WorkerProcess

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """The URL of the PostgreSQL server the suite runs against."""
    given = os.environ.get("PERDURE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    from perdure.store import embedded

    os.environ["PERDURE_EMBEDDED_FAST"] = "1"
    base = Path(tempfile.mkdtemp(prefix="perdure-test-", dir="/tmp"))
    base.chmod(0o755)
    server = embedded.ensure_server(base / "pg", max_connections=400)
    try:
        yield server.url
    finally:
        embedded.stop_server(server.data_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    """A schema name of this test's own, dropped after it."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def make_app(pg_url: str, schema: str) -> Iterator[Callable[..., perdure.App]]:
    """Build Apps on this test's schema; all are closed after the test."""
    made: list[perdure.App] = []

    def factory(**kwargs: object) -> perdure.App:
        app = perdure.App(pg_url, schema=schema, **kwargs)  # type: ignore[arg-type]
        made.append(app)
        return app

    yield factory
    for app in made:
        app.close()


@pytest.fixture
def app(make_app: Callable[..., perdure.App]) -> perdure.App:
    """An App on this test's schema."""
    return make_app()


@pytest.fixture
def db(pg_url: str, schema: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection whose search_path is this test's schema."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET search_path TO {schema}, public")
        yield conn


@pytest.fixture
def spawn_worker(pg_url: str, schema: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``perdure worker`` subprocesses on this test's schema; all are killed after."""
    procs: list[WorkerProcess] = []

    def spawn(target: str, *args: str, **env: str) -> WorkerProcess:
        proc = WorkerProcess.start(target, pg_url, schema, list(args), env)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
