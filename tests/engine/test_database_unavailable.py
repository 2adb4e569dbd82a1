"""When the server cannot be reached, App calls raise DatabaseUnavailable, and which do."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import perdure
from helpers import wait_until
from perdure.store import embedded


@pytest.fixture
def own_server() -> Iterator[embedded.EmbeddedServer]:
    """A PostgreSQL server of this test's own, which it may stop."""
    base = Path(tempfile.mkdtemp(prefix="perdure-unavailable-", dir="/tmp"))
    base.chmod(0o755)
    server = embedded.ensure_server(base / "pg")
    try:
        yield server
    finally:
        embedded.stop_server(server.data_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(300)
def test_calls_on_a_stopped_server_raise_database_unavailable_then_work_again(
    own_server: embedded.EmbeddedServer,
) -> None:
    app = perdure.App(own_server.url, schema="unavailable")

    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: int) -> int:
        return value

    try:
        handle = app.start("echo", 1)
        assert app.get_run(handle.id).status == perdure.RunStatus.QUEUED
        embedded.stop_server(own_server.data_dir)

        # Reads, starts and management calls alike raise the typed error, from
        # the driver's, once the pool has waited for a connection in vain. They
        # wait side by side, so the test waits once.
        calls = {
            "get_run": lambda: app.get_run(handle.id),
            "list_runs": lambda: app.list_runs(),
            "start": lambda: app.start("echo", 2),
            "cancel": lambda: app.cancel(handle.id),
            "signal": lambda: app.signal(handle.id, "go"),
            "queues": lambda: app.queues(),
        }

        def outcome(call: Callable[[], object]) -> BaseException | None:
            try:
                call()
            except BaseException as exc:
                return exc
            return None

        with ThreadPoolExecutor(len(calls)) as pool:
            outcomes = dict(zip(calls, pool.map(outcome, calls.values()), strict=True))
        for name, exc in outcomes.items():
            assert isinstance(exc, perdure.DatabaseUnavailable), (name, exc)
            assert exc.__cause__ is not None, name

        # The server back on its port: the same App works again without a restart.
        again = embedded.ensure_server(own_server.data_dir)
        assert again.url == own_server.url
        wait_until(lambda: _answers(app, handle.id), 30, what="the App to reconnect")
        assert app.get_run(handle.id).status == perdure.RunStatus.QUEUED
    finally:
        app.close()


def _answers(app: perdure.App, run_id: str) -> bool:
    try:
        app.get_run(run_id)
    except perdure.DatabaseUnavailable:
        return False
    return True


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("auto_migrate", [True, False], ids=["migrating", "checking"])
def test_the_first_call_on_a_closed_port_raises_database_unavailable(auto_migrate: bool) -> None:
    app = perdure.App(
        f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres",
        schema="nowhere",
        auto_migrate=auto_migrate,
    )
    try:
        with pytest.raises(perdure.DatabaseUnavailable):
            app.list_runs()
    finally:
        app.close()


@pytest.mark.parametrize("auto_migrate", [True, False], ids=["migrating", "checking"])
@pytest.mark.parametrize("wrong", ["database", "role"])
def test_a_server_that_refuses_the_url_is_a_configuration_error_not_an_outage(
    pg_url: str, auto_migrate: bool, wrong: str
) -> None:
    """A wrong database or role will not come back by retrying: the first call says so."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(pg_url)
    params["dbname" if wrong == "database" else "user"] = "no_such_name_here"
    app = perdure.App(make_conninfo(**params), schema="nowhere", auto_migrate=auto_migrate)
    try:
        with pytest.raises(perdure.ConfigurationError) as refused:
            app.list_runs()
        assert "PostgreSQL refused the connection" in str(refused.value)
        assert '"no_such_name_here" does not exist' in str(refused.value)
        assert not isinstance(refused.value, perdure.DatabaseUnavailable)
    finally:
        app.close()
