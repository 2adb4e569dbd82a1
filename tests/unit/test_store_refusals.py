"""The store's refusals: a role name no grant may name, a server that will not set up.

Each case gets a typed error that says what is wrong, and leaves nothing
half made: no grant runs, no server is reported running.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import perdure
from perdure.store import embedded, privileges


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
