"""Invariants 2 and 7 across a network partition, with a real network and real processes.

A worker runs in a network namespace of its own and reaches a dedicated
PostgreSQL over a veth pair, by TCP. The test cuts the link while that worker
is inside a step, waits past its lease until another worker (on the host)
takes the run over and finishes it, then heals the link. The first worker's
late checkpoint is fenced (LeaseLost in its log), and it goes on to complete
new work on the same connections' pool. Needs root and iproute2; skipped with
the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import perdure
from helpers import WorkerProcess, wait_until
from perdure.store import embedded

TARGET = "apps.crash_app:app"
LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2", "--concurrency", "1"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@dataclass
class Partitionable:
    """A namespace linked to the host by a veth pair, and a server listening on the host end."""

    namespace: str
    host_link: str
    host_address: str
    host_url: str  # from the host, over the server's unix socket
    namespace_url: str  # from inside the namespace, over the veth pair

    def cut(self) -> None:
        """Take the host end of the link down: packets in both directions are lost."""
        _ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        """Bring the link back up."""
        _ip("link", "set", self.host_link, "up")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    return None


@pytest.fixture
def partitionable() -> Iterator[Partitionable]:
    """The namespace, the veth pair and a dedicated server; all removed afterwards."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    namespace, host_link, peer_link = f"pdr{tag}", f"pdrh{tag}", f"pdrn{tag}"
    octet = int(tag[:2], 16)
    host_address, peer_address = f"10.213.{octet}.1", f"10.213.{octet}.2"
    base = Path(tempfile.mkdtemp(prefix="perdure-partition-", dir="/tmp"))
    base.chmod(0o755)
    server: embedded.EmbeddedServer | None = None
    try:
        added = _ip("netns", "add", namespace, check=False)
        if added.returncode != 0:
            pytest.skip(f"cannot create a network namespace: {added.stderr.strip()}")
        _ip("link", "add", host_link, "type", "veth", "peer", "name", peer_link)
        _ip("link", "set", peer_link, "netns", namespace)
        _ip("addr", "add", f"{host_address}/30", "dev", host_link)
        _ip("link", "set", host_link, "up")
        inside = ["netns", "exec", namespace, "ip"]
        _ip(*inside, "addr", "add", f"{peer_address}/30", "dev", peer_link)
        _ip(*inside, "link", "set", peer_link, "up")
        _ip(*inside, "link", "set", "lo", "up")
        with socket.socket() as probe:
            probe.bind((host_address, 0))
            port = probe.getsockname()[1]
        server = embedded.ensure_server(base / "pg", port=port, listen=host_address)
        # initdb trusts local connections only; let the namespace's address in.
        with open(server.data_dir / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {peer_address}/32 trust\n")
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield Partitionable(
            namespace,
            host_link,
            host_address,
            server.url,
            f"postgresql://postgres@{host_address}:{port}/postgres?connect_timeout=5",
        )
    finally:
        # Deleting the namespace deletes its end of the pair, and so the pair.
        _ip("netns", "delete", namespace, check=False)
        _ip("link", "delete", host_link, check=False)
        if server is not None:
            embedded.stop_server(server.data_dir)
        shutil.rmtree(base, ignore_errors=True)


def test_a_partitioned_worker_is_fenced_then_rejoins_and_works(
    partitionable: Partitionable,
) -> None:
    net = partitionable
    schema = f"t_{uuid.uuid4().hex[:12]}"
    workers: list[WorkerProcess] = []
    with (
        perdure.App(net.host_url, schema=schema) as app,
        psycopg.connect(net.host_url, autocommit=True) as db,
    ):
        app.ensure_schema()
        db.execute(f"CREATE TABLE {schema}.ledger (run_id uuid, step text, pid int)")
        db.execute(f"CREATE TABLE {schema}.tx_ledger (run_id uuid, pid int)")

        def slow_starts(run_id: str) -> int:
            row = db.execute(
                f"SELECT count(*) FROM {schema}.ledger WHERE run_id = %s AND step = 'slow'",
                (run_id,),
            ).fetchone()
            return int(row[0]) if row else 0

        try:
            isolated = WorkerProcess.start(
                TARGET,
                net.namespace_url,
                schema,
                [*LEASE, "--worker-id", "isolated"],
                {},
                prefix=["ip", "netns", "exec", net.namespace],
            )
            workers.append(isolated)
            wait_until(
                lambda: any(w.name == "crashy" for w in app.workflows()),
                30,
                what=f"the isolated worker to register over the veth pair: {isolated.output()}",
            )
            first = app.start("crashy", {"slow": 4})
            wait_until(lambda: slow_starts(first.id) == 1, 30, what="the isolated worker's step")
            assert first.get().worker_id == "isolated"

            net.cut()
            try:
                rescuer = WorkerProcess.start(
                    TARGET, net.host_url, schema, [*LEASE, "--worker-id", "rescuer"], {}
                )
                workers.append(rescuer)
                # The isolated worker's lease lapses; the rescuer claims the run and
                # finishes it while the isolated worker cannot reach the database.
                output = first.result(timeout=60)
                assert output["slow"] == output["last"] == rescuer.pid
                assert first.get().worker_id == "rescuer"
            finally:
                net.heal()

            # Its late checkpoint (attempt 1) reaches the server and is refused.
            wait_until(
                lambda: "lost its lease" in isolated.output(),
                60,
                what="LeaseLost in the isolated worker's log",
            )
            steps = {s.name: s for s in app.steps(first.id)}
            assert steps["slow"].output == rescuer.pid and steps["slow"].attempts == 1
            history = [e for e in app.history(first.id) if e.event == "step_completed"]
            assert [e.step_name for e in history] == ["first", "slow", "record", "last"]

            # With the rescuer gone, new work can only be done by the isolated worker.
            rescuer.signal(signal.SIGTERM)
            assert rescuer.wait(30) == 0
            second = app.start("crashy", {"slow": 0})
            output = second.result(timeout=60)
            assert second.get().worker_id == "isolated"
            assert output["first"] == output["last"] == isolated.pid
            assert isolated.proc.poll() is None, isolated.output()
        finally:
            for worker in workers:
                worker.kill()
            db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
