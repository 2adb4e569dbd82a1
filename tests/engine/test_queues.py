"""Queue concurrency limits, enforced by the claim, with in-process workers.

Every run here holds its one step at a gate until the test opens it, so the
test can look at the system while the limit is being pressed against: the
runs inside, the claimed tasks, and claim attempts the other workers made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import perdure
from helpers import BackgroundWorker, claimed_while_queue_settings_locked, wait_until
from perdure.cli.main import cli

#: The tests count the workers' fallback polls: those run often here.
FAST = {"concurrency": 4, "poll_seconds": 0.05, "idle_poll_seconds": 0.05, "lease_seconds": 5}


class Gate:
    """A step body that counts who is inside and blocks until the test opens it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.opened = threading.Event()

    def step(self, queue: str) -> Callable[[], int]:
        """The step function for a run of ``queue``."""

        def hold() -> int:
            with self._lock:
                self.inside[queue] = self.inside.get(queue, 0) + 1
                self.most[queue] = max(self.most.get(queue, 0), self.inside[queue])
            try:
                if not self.opened.wait(timeout=60):
                    raise RuntimeError("the gate was never opened")
            finally:
                with self._lock:
                    self.inside[queue] -= 1
            return 1

        return hold

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        # Open on the way out, failed assertion or not, so that the workers
        # entered before the gate can stop.
        self.opened.set()

    def count(self, queue: str) -> int:
        """How many runs of ``queue`` are inside now."""
        with self._lock:
            return self.inside.get(queue, 0)


@pytest.fixture
def gate() -> Iterator[Gate]:
    made = Gate()
    yield made
    made.opened.set()


def define(app: perdure.App, gate: Gate, *queues: str) -> None:
    """One workflow per queue, named after it, whose single step waits at ``gate``."""

    def workflow(queue: str) -> Callable[[perdure.SyncContext, int], int]:
        def body(ctx: perdure.SyncContext, n: int) -> int:
            return ctx.step("hold", gate.step(queue)) + n

        return body

    for queue in queues:
        app.workflow(queue, queue=queue)(workflow(queue))


def claimed(db: psycopg.Connection[Any], queue: str) -> list[tuple[str, int]]:
    """(worker id, tasks held) of ``queue``'s claimed tasks."""
    return db.execute(
        "SELECT worker_id, count(*) FROM tasks WHERE status = 'claimed' AND queue = %s"
        " GROUP BY worker_id ORDER BY worker_id",
        (queue,),
    ).fetchall()


def every_worker_tried_again(workers: list[BackgroundWorker]) -> None:
    """Wait until each worker has come back empty-handed from two more claims."""
    before = [w.count("worker_idle") for w in workers]
    wait_until(
        lambda: all(w.count("worker_idle") >= n + 2 for w, n in zip(workers, before, strict=True)),
        20,
        what="every worker to try to claim again",
    )


@pytest.mark.parametrize(
    ("limits", "workers"),
    [({"concurrency": 2}, 3), ({"worker_concurrency": 1}, 2)],
    ids=["global", "per-worker"],
)
def test_a_limit_holds_across_workers(
    app: perdure.App, gate: Gate, db: psycopg.Connection[Any], limits: Any, workers: int
) -> None:
    app.queue("media", **limits)
    define(app, gate, "media")
    handles = [app.start("media", i) for i in range(8)]
    with ExitStack() as stack:
        serving = [stack.enter_context(BackgroundWorker(app, **FAST)) for _ in range(workers)]
        stack.enter_context(gate)
        wait_until(lambda: gate.count("media") == 2, 20, what="two runs at the gate")
        every_worker_tried_again(serving)
        assert gate.count("media") == 2
        held = claimed(db, "media")
        assert sum(n for _, n in held) == 2
        if "worker_concurrency" in limits:
            assert held == [(w.worker.id, 1) for w in sorted(serving, key=lambda w: w.worker.id)]
        gate.opened.set()
        assert [h.result(timeout=30) for h in handles] == [i + 1 for i in range(8)]
    assert gate.most["media"] == 2


def test_a_limited_queue_leaves_the_others_alone(
    app: perdure.App, gate: Gate, db: psycopg.Connection[Any]
) -> None:
    app.queue("media", concurrency=1)
    define(app, gate, "media", "fast")
    # The limited queue's runs come first in claim order: they must not crowd
    # the unlimited queue's runs out of the worker's batch.
    media = [app.start("media", i, priority=10) for i in range(4)]
    fast = [app.start("fast", i) for i in range(3)]
    with BackgroundWorker(app, **{**FAST, "concurrency": 8}) as worker, gate:
        wait_until(
            lambda: (gate.count("media"), gate.count("fast")) == (1, 3),
            20,
            what="one media run and every fast run at the gate",
        )
        every_worker_tried_again([worker])
        assert (gate.count("media"), gate.count("fast")) == (1, 3)
        gate.opened.set()
        for handle in media + fast:
            handle.result(timeout=30)
    assert gate.most == {"media": 1, "fast": 3}


def test_a_worker_without_global_limits_claims_without_locking(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    app.queue("fast", worker_concurrency=10)

    @app.workflow("fast", queue="fast")
    async def fast(ctx: perdure.Context, n: int) -> int:
        return n

    with BackgroundWorker(app, **FAST):
        # The first claim looks under the queue locks and finds no global limit.
        assert app.start("fast", -1).result(timeout=30) == -1
        # The claims since lock nothing: a transaction holding the queue
        # settings in EXCLUSIVE mode does not hold them back.
        claimed_while_queue_settings_locked(pg_url, schema, lambda: app.start("fast", 1))


def test_limits_set_from_the_cli_apply_to_a_running_worker(
    app: perdure.App, gate: Gate, db: psycopg.Connection[Any], pg_url: str, schema: str
) -> None:
    define(app, gate, "media")
    base = ["--database-url", pg_url, "--schema", schema, "queues"]
    runner = CliRunner()
    with BackgroundWorker(app, **FAST) as worker, gate:
        # The worker knows of no limit: it claims on the plain path.
        gate.opened.set()
        assert app.start("media", 0).result(timeout=30) == 1
        claimed_while_queue_settings_locked(pg_url, schema, lambda: app.start("media", 1))
        gate.opened.clear()

        done = runner.invoke(cli, [*base, "set", "media", "--concurrency", "1"])
        assert done.exit_code == 0, done.output
        assert "queue media: concurrency 1, per worker -" in done.output
        limited = [app.start("media", i) for i in range(3)]
        wait_until(lambda: gate.count("media") == 1, 20, what="one run at the gate")
        every_worker_tried_again([worker])
        assert gate.count("media") == 1
        assert sum(n for _, n in claimed(db, "media")) == 1

        listed = runner.invoke(cli, [*base, "list", "--json"])
        assert listed.exit_code == 0, listed.output
        assert '"running": 1' in listed.output and '"ready": 2' in listed.output

        # Clearing the limit lets the waiting runs in at once.
        done = runner.invoke(cli, [*base, "set", "media", "--concurrency", "none"])
        assert done.exit_code == 0, done.output
        wait_until(lambda: gate.count("media") == 3, 20, what="all three runs at the gate")
        gate.opened.set()
        for handle in limited:
            handle.result(timeout=30)


def test_code_states_its_settings_and_leaves_the_rest_to_operators(
    make_app: Callable[..., perdure.App], pg_url: str, schema: str
) -> None:
    runner = CliRunner()
    base = ["--database-url", pg_url, "--schema", schema, "queues"]
    first = make_app()
    first.queue("media", concurrency=2)
    first.register()
    operator = make_app()
    operator.set_queue("media", concurrency=5, worker_concurrency=3)

    # A worker start (register) writes back what its code states, and only that.
    second = make_app()
    second.queue("media", concurrency=2)
    second.register()
    (media,) = [q for q in operator.queues() if q.name == "media"]
    assert (media.concurrency, media.worker_concurrency) == (2, 3)

    # A declaration can clear a limit by stating None.
    third = make_app()
    third.queue("media", worker_concurrency=None)
    third.register()
    shown = runner.invoke(cli, [*base, "list"])
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("media"))
    assert line.split()[:3] == ["media", "2", "-"]

    bad = runner.invoke(cli, [*base, "set", "media", "--concurrency", "0"])
    assert bad.exit_code == 2 and "neither a whole number" in bad.output
    nothing = runner.invoke(cli, [*base, "set", "media"])
    assert nothing.exit_code == 2 and "give --concurrency" in nothing.output
