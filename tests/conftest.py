"""Shared fixtures: a real PostgreSQL for the session, a fresh schema per test.

The suite starts its own embedded PostgreSQL in a temporary directory unless
PERDURE_TEST_DATABASE_URL points at a server. Tests marked ``all_servers``
also run on PostgreSQL 15 (Debian's binaries, started the same way, or
PERDURE_TEST_PG15_URL). Each test gets its own schema (perdure's schema name
is configurable), dropped afterwards.
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
from coverage_floor import Figure, measure, whole_suite
from helpers import WorkerProcess

TESTS_DIR = Path(__file__).resolve().parent

#: perdure's, the engine's and the store's coverage in this run, for the summary.
_FIGURES: list[Figure] = []
#: Whether the floors were enforced (the whole suite ran).
_ENFORCED: list[bool] = []


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[object]:
    """Once pytest-cov has combined the run's data, hold perdure, its engine and store to floors."""
    result = yield
    if session.config.option.collectonly:
        return result
    _FIGURES[:] = measure(session)
    _ENFORCED[:] = [whole_suite(session)]
    if _ENFORCED[0] and any(not figure.holds for figure in _FIGURES):
        session.testsfailed += 1
    return result


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print each floored package's coverage and whether it holds its floor."""
    enforced = bool(_ENFORCED and _ENFORCED[0])
    for figure in _FIGURES:
        verdict = "holds" if figure.holds else "FAILS"
        if not enforced:
            verdict += " (not enforced: some tests only)"
        terminalreporter.write_line(
            f"{figure.summary()}: {verdict}",
            red=enforced and not figure.holds,
            green=figure.holds,
        )


#: Debian's PostgreSQL 15 (package postgresql-15), the second server of the suite.
PG15_BIN = Path(os.environ.get("PERDURE_TEST_PG15_BIN", "/usr/lib/postgresql/15/bin"))
#: Tests marked ``all_servers`` run once per server; these are the servers' ids.
SERVERS = ("pg18", "pg15")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the ``all_servers`` tests on PostgreSQL 15 too, next to the default server.

    The other tests run on the default server only: the subset keeps the second
    server's share of the suite under a minute.
    """
    if "pg_url" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("all_servers") is None:
        return
    metafunc.parametrize("pg_url", SERVERS, indirect=True, scope="session")


@pytest.fixture(scope="session")
def pg_url(request: pytest.FixtureRequest) -> str:
    """The URL of the PostgreSQL server the test runs against (see pytest_generate_tests)."""
    server = getattr(request, "param", "pg18")
    return str(request.getfixturevalue("pg15_url" if server == "pg15" else "default_pg_url"))


@pytest.fixture(scope="session")
def default_pg_url() -> Iterator[str]:
    """The suite's own server: PERDURE_TEST_DATABASE_URL, or the embedded PostgreSQL."""
    given = os.environ.get("PERDURE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    yield from _temporary_server("pg", None)


@pytest.fixture(scope="session")
def pg15_url() -> Iterator[str]:
    """A PostgreSQL 15 server: PERDURE_TEST_PG15_URL, or Debian's binaries started here.

    Missing binaries fail the tests that need them, loudly: `.ci/run` installs
    postgresql-15. PERDURE_TEST_SKIP_PG15=1 skips them instead, for a machine
    that cannot have them (say so when you report its results).
    """
    given = os.environ.get("PERDURE_TEST_PG15_URL")
    if given:
        yield given
        return
    if not (PG15_BIN / "postgres").exists():
        reason = (
            f"PostgreSQL 15 is not installed ({PG15_BIN}/postgres is missing): install it "
            "with `apt-get install postgresql-15` (as .ci/run does), point "
            "PERDURE_TEST_PG15_URL at a PostgreSQL 15 server, or set "
            "PERDURE_TEST_SKIP_PG15=1 to skip the PostgreSQL 15 runs"
        )
        if os.environ.get("PERDURE_TEST_SKIP_PG15") == "1":
            pytest.skip(reason)
        pytest.fail(reason)
    yield from _temporary_server("pg15", PG15_BIN)


def _temporary_server(name: str, bins: Path | None) -> Iterator[str]:
    """Start a throwaway server (the embedded one, or the one in ``bins``) for the session."""
    from perdure.store import embedded

    os.environ["PERDURE_EMBEDDED_FAST"] = "1"
    base = Path(tempfile.mkdtemp(prefix=f"perdure-test-{name}-", dir="/tmp"))
    base.chmod(0o755)
    server = embedded.ensure_server(base / "pg", max_connections=400, bins=bins)
    try:
        yield server.url
    finally:
        embedded.stop_server(server.data_dir, bins=bins)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    """A schema name of this test's own, dropped after it."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        try:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        except psycopg.errors.LockNotAvailable:
            # A worker the test stopped left a transaction open (it is reported
            # by the test's own assertions when it matters): end it, then drop.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state = 'idle in transaction'"
            )
            conn.execute("SET lock_timeout = 0")
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
    """An App on this test's schema, migrated: an App's reads never create its schema,
    and a test may read (or poll workers it spawned) before it writes."""
    made = make_app()
    made.ensure_schema()
    return made


@pytest.fixture
def db(pg_url: str, schema: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection whose search_path is this test's schema."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET search_path TO {schema}, public")
        yield conn


@pytest.fixture
def spawn_worker(pg_url: str, schema: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``perdure worker`` subprocesses on this test's schema; all are stopped after.

    A worker still running at the end is stopped at once (SIGTERM twice), so
    that it saves its share of the coverage; SIGKILL only if it does not exit.
    """
    procs: list[WorkerProcess] = []

    def spawn(target: str, *args: str, **env: str) -> WorkerProcess:
        proc = WorkerProcess.start(target, pg_url, schema, list(args), env)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.stop()
        # Shown by pytest only when the test failed: what each worker said.
        print(f"--- worker {proc.pid} (exit {proc.proc.poll()}) ---\n{proc.output()[-4000:]}")
