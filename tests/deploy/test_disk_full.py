"""A full disk is the database's fault, not the step's: the attempt is handed back uncounted.

A server of the test's own keeps its data directory on a small tmpfs mounted
here (the tests run as root, here and in CI). The test fills that disk right
before a ``ctx.transaction`` step commits: the checkpoint's write, in the
user's transaction, fails with DiskFull (SQLSTATE 53100). The step is allowed
one attempt; after the space is freed the run must complete, with the step's
row written once and no attempt of the step consumed. A client call made
while the disk is full gets DatabaseUnavailable with the server's message.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.store import embedded

#: The size of the server's disk: the cluster takes about 40 MB.
DISK = "128m"


@dataclass
class SmallDisk:
    """A PostgreSQL server whose data lives on a tmpfs of :data:`DISK`."""

    url: str
    mount: Path

    def fill(self) -> Path:
        """Fill the disk to its last byte with a file of its own; that file."""
        filler = self.mount / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (b"\0" * (1 << 20), b"\0" * 4096, b"\0"):
                try:
                    while True:
                        os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        assert shutil.disk_usage(self.mount).free < 4096
        return filler


@pytest.fixture
def small_disk() -> Iterator[SmallDisk]:
    """A server of this test's own, its data directory on a tmpfs mounted here."""
    base = Path(tempfile.mkdtemp(prefix="perdure-diskfull-", dir="/tmp"))
    base.chmod(0o755)
    mount = base / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(
            f"cannot mount a tmpfs for the full-disk test (exit {done.returncode}: "
            f"{done.stderr.strip()}): it must run as root, with the right to mount "
            "(CAP_SYS_ADMIN), as it does in CI"
        )
    data = mount / "pg"
    try:
        server = embedded.ensure_server(
            data,
            max_connections=60,
            # No checkpoint or autovacuum in the middle of the full window.
            settings={"autovacuum": "off", "checkpoint_timeout": "1h"},
        )
        yield SmallDisk(server.url, mount)
    finally:
        try:
            embedded.stop_server(data)
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
            shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(120)
def test_a_full_disk_at_a_transaction_steps_commit_counts_no_attempt(
    small_disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    app = perdure.App(small_disk.url, schema="perdure")
    db = psycopg.connect(small_disk.url, autocommit=True)
    arrived, proceed = threading.Event(), threading.Event()
    calls: list[str] = []
    # The step's output is big and random: its checkpoint goes to new TOAST
    # pages, which a full disk cannot give. The user's row fits in a page
    # that exists already.
    output = secrets.token_urlsafe(200_000)

    def record(conn: psycopg.Connection[Any], run_id: str) -> str:
        calls.append(run_id)
        arrived.set()
        assert proceed.wait(60), "the test never let the step go on"
        conn.execute("INSERT INTO perdure.effects (run_id) VALUES (%s)", (run_id,))
        return output

    @app.workflow("tx")
    async def tx(ctx: perdure.Context) -> int:
        once = perdure.RetryPolicy(max_attempts=1)
        written = await ctx.transaction("record", record, ctx.run_id, retry=once)
        return len(written)

    @app.workflow("other")
    async def other(ctx: perdure.Context, pad: str) -> None:
        return None

    filler: Path | None = None
    try:
        app.ensure_schema()
        db.execute("CREATE TABLE perdure.effects (run_id uuid)")
        db.execute("INSERT INTO perdure.effects VALUES (NULL)")
        handle = app.start("tx")
        with BackgroundWorker(app, concurrency=2, poll_seconds=0.05, lease_seconds=5):
            try:
                assert arrived.wait(30), "the step never started"
                # A fresh WAL segment: the window's few records need no new one.
                db.execute("SELECT pg_switch_wal()")
                db.execute("CREATE TABLE perdure.wal_warm (x int)")
                filler = small_disk.fill()
                # A client's call in the window: DatabaseUnavailable, with the server's words.
                with pytest.raises(perdure.DatabaseUnavailable, match="No space left on device"):
                    app.start("other", {"pad": secrets.token_urlsafe(200_000)})
                proceed.set()
                wait_until(
                    lambda: any(
                        "lost the database" in r.getMessage() and "No space left" in r.getMessage()
                        for r in caplog.records
                    ),
                    what="the step's commit to fail on the full disk",
                )
                filler.unlink()
                filler = None
                assert handle.result(timeout=30) == len(output)
            finally:
                # However the window ends, the step is let go and the disk freed.
                proceed.set()
                if filler is not None:
                    filler.unlink()
                    filler = None
        # The step ran again after the fault, and its row was written once.
        assert calls == [handle.id] * len(calls) and len(calls) >= 2
        found = db.execute(
            "SELECT count(*) FROM perdure.effects WHERE run_id = %s", (handle.id,)
        ).fetchone()
        assert found == (1,)
        # Its one attempt was not consumed: the fault was not a failure.
        assert [(s.name, s.status, s.attempts) for s in app.steps(handle.id)] == [
            ("record", "completed", 1)
        ]
        events = [e.event for e in app.history(handle.id)]
        for failure in ("step_retry_scheduled", "step_failed", "run_retry_scheduled"):
            assert failure not in events, events
        reasons = [
            e.detail.get("reason") for e in app.history(handle.id) if e.event == "run_released"
        ]
        assert "database fault: 53100" in reasons, reasons
        assert "lease_expired" not in events
    finally:
        db.close()
        app.close()
