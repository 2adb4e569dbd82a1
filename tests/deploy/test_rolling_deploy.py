"""A rolling deploy: the previous release's workers serve while the schema migrates.

The previous release is this repository's code just before the newest
migration was added (taken from git history with ``git archive``). Its
workers run a mixed workload; meanwhile this release's ``perdure migrate
--plan`` reports the pending migration's locks and the live workers, and
``perdure migrate`` applies it. The old workers keep serving through and after
the migration, a worker of this release joins them, and every run completes
with each ``ctx.transaction`` effect committed exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import psycopg
import pytest

import perdure
from apps import chaos_app
from chaos import checker
from helpers import TESTS_DIR, WorkerProcess, wait_until
from perdure.store import migrate

REPO = TESTS_DIR.parent
#: The previous release's client: starts one run per key (the key names its workflow).
OLD_CLIENT = """
import sys
import perdure
app = perdure.App(sys.argv[1], schema=sys.argv[2], auto_migrate=False)
for key in sys.argv[3:]:
    app.start(key.rsplit("-", 1)[0], {"work": 0.02, "sleep": 0.2}, key=key)
app.close()
"""
MIGRATIONS = "src/perdure/store/sql/migrations"


@pytest.fixture(scope="module")
def previous_release() -> Iterator[Path]:
    """The code (src and tests) as it was before the newest migration was added."""
    newest = migrate.available()[-1]
    path = f"{MIGRATIONS}/{newest.version:04d}_{newest.name}.sql"
    # Along main: a migration that came with a merge was added by the merge.
    added = _git(
        "log", "--first-parent", "-m", "--diff-filter=A", "--format=%H", "--", path
    ).split()
    assert added, f"{path} is not in git history: the rolling-deploy test needs the repository"
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", f"{added[-1]}^", "src", "tests"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="perdure-previous-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder)


@pytest.mark.timeout(300)
def test_the_previous_release_serves_while_the_schema_migrates(
    pg_url: str, schema: str, previous_release: Path
) -> None:
    old_path = os.pathsep.join([str(previous_release / "src"), str(previous_release / "tests")])
    old = {"PYTHONPATH": old_path}
    target = migrate.latest(migrate.available())
    # The schema as the previous release left it.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from perdure.store import migrate; "
            "migrate.migrate(sys.argv[1], sys.argv[2])",
            pg_url,
            schema,
        ],
        env={**os.environ, **old},
        check=True,
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert migrate.current_version(conn, schema) == target - 1
        for ddl in chaos_app.LEDGER_DDL:
            conn.execute(ddl.replace("{s}", schema))
    args = ["--concurrency", "6", "--lease-seconds", "10", "--shutdown-seconds", "1"]
    workers = [_worker(pg_url, schema, args, old) for _ in range(2)]
    client = perdure.App(pg_url, schema=schema, auto_migrate=False, pool_size=2)
    keys = [_key(n) for n in range(40)]
    try:
        wait_until(
            lambda: len(_rows(pg_url, f"SELECT id FROM {schema}.workers")) == 2,
            60,
            what="the previous release's workers to register",
        )
        # The previous release's clients start runs before the migration.
        subprocess.run(
            [sys.executable, "-c", OLD_CLIENT, pg_url, schema, *keys],
            env={**os.environ, **old},
            check=True,
        )
        plan = _cli(pg_url, schema, "migrate", "--plan")
        print(plan)
        assert f"version {target - 1} -> {target}" in plan, plan
        # Each pending migration with the locks it takes and for how long.
        assert f"{target:04d}_" in plan and "holds its locks" in plan, plan
        # Releases that predate the versions column show as unknown, later ones as compatible.
        assert "live workers: 2 (" in plan and ", 0 not," in plan, plan
        applied = _cli(pg_url, schema, "migrate")
        assert f"applied migration {target:04d}_" in applied, applied
        _start(client, keys, 40)
        # A worker of this release joins the old ones on the migrated schema.
        workers.append(_worker(pg_url, schema, args, {}))
        _start(client, keys, 40)
        for key in keys:
            if key.startswith("chaos_signal"):
                client.signal(key, "go", {"key": key}, key="go")
        wait_until(
            lambda: not _rows(pg_url, f"SELECT id FROM {schema}.runs WHERE status <> 'completed'"),
            180,
            interval=0.25,
            what="every run to complete",
        )
        assert all(w.proc.poll() is None for w in workers), "a worker exited"
        served = _rows(
            pg_url,
            f"SELECT DISTINCT worker_id FROM {schema}.history WHERE worker_id IS NOT NULL",
        )
        assert len(served) == 3, served
        after = _cli(pg_url, schema, "migrate", "--plan")
        assert "live workers: 3 (" in after and ", 0 not," in after, after
        assert f"schema {target} release {perdure.__version__}: compatible" in after, after
        with psycopg.connect(pg_url, autocommit=True) as conn:
            report = checker.check(
                conn,
                schema,
                keys=keys,
                expected_steps=chaos_app.STEPS,
                faults=[],
                aftershock=0.0,
                live_double_claims=[],
            )
        print("\n".join(report.lines()))
        broken = [(inv.name, inv.violations[:5]) for inv in report.invariants if not inv.ok]
        assert not broken, broken
    finally:
        client.close()
        for worker in workers:
            worker.kill()
            print(f"--- worker {worker.pid} ---\n{worker.output()[-3000:]}")


def _worker(url: str, schema: str, args: list[str], env: dict[str, str]) -> WorkerProcess:
    """A chaos-app worker; ``env`` may put the previous release first on PYTHONPATH."""
    return WorkerProcess.start("apps.chaos_app:app", url, schema, args, env)


def _key(n: int) -> str:
    return f"{list(chaos_app.STEPS)[n % len(chaos_app.STEPS)]}-{n}"


def _start(client: perdure.App, keys: list[str], count: int) -> None:
    for _ in range(count):
        key = _key(len(keys))
        client.start(key.rsplit("-", 1)[0], {"work": 0.02, "sleep": 0.2}, key=key)
        keys.append(key)


def _cli(url: str, schema: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "perdure", "--database-url", url, "--schema", schema, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout
