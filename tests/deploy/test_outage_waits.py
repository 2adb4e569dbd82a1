"""App calls that wait ride out a database outage, and raise only when their timeout ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import perdure
from chaos.server import OwnServer
from helpers import BackgroundWorker, WorkerProcess, wait_until


@pytest.fixture
def server() -> Iterator[OwnServer]:
    """A server of the test's own, which it stops and starts again."""
    own = OwnServer.create(max_connections=50)
    try:
        yield own
    finally:
        own.close()


def build(app: perdure.App) -> None:
    """A workflow that publishes an event, streams two values and returns the signal's payload."""

    @app.workflow("waits")
    async def waits(ctx: perdure.Context) -> Any:
        payload = await ctx.wait_for_signal("go", timeout=600)
        await ctx.set_event("seen", payload)
        await ctx.write_stream("out", 1)
        await ctx.write_stream("out", 2)
        await ctx.close_stream("out")
        return payload


def test_result_event_and_stream_waits_ride_out_a_restart(server: OwnServer) -> None:
    app = perdure.App(server.url, schema="waits", pool_size=2)
    build(app)
    try:
        run = app.start("waits")
        answers: dict[str, Any] = {}

        async def stream_async() -> list[Any]:
            return [v async for v in app.read_stream_async(run.id, "out", timeout=120)]

        calls = {
            "result": lambda: run.result(timeout=120),
            "event": lambda: app.get_event(run.id, "seen", timeout=120),
            "stream": lambda: list(app.read_stream(run.id, "out", timeout=120)),
            "result_async": lambda: asyncio.run(run.result_async(timeout=120)),
            "event_async": lambda: asyncio.run(app.get_event_async(run.id, "seen", timeout=120)),
            "stream_async": lambda: asyncio.run(stream_async()),
        }

        def call(name: str) -> None:
            try:
                answers[name] = calls[name]()
            except BaseException as exc:
                answers[name] = exc

        threads = [threading.Thread(target=call, args=(n,), daemon=True) for n in calls]
        for thread in threads:
            thread.start()
        server.restart(down_seconds=3.0)
        with BackgroundWorker(app, poll_seconds=0.05, lease_seconds=5):
            app.signal(run.id, "go", "hello")
            for thread in threads:
                thread.join(120)
        assert answers == {
            "result": "hello",
            "event": "hello",
            "stream": [1, 2],
            "result_async": "hello",
            "event_async": "hello",
            "stream_async": [1, 2],
        }
    finally:
        app.close()


def test_a_wait_raises_database_unavailable_when_its_timeout_ends(server: OwnServer) -> None:
    app = perdure.App(server.url, schema="waits", pool_size=2)
    build(app)
    try:
        run = app.start("waits")
        server.stop()
        began = time.monotonic()
        with pytest.raises(perdure.DatabaseUnavailable):
            run.result(timeout=3)
        waited = time.monotonic() - began
        # Not at the first lost connection: only once the timeout ended.
        assert waited >= 3.0
    finally:
        server.start()
        app.close()


def test_a_worker_started_while_the_database_is_down_waits_for_it(server: OwnServer) -> None:
    app = perdure.App(server.url, schema="waits", pool_size=2)
    app.ensure_schema()
    server.stop()
    worker = WorkerProcess.start(
        "apps.cli_app:app", server.url, "waits", ["--connect-timeout", "120"], {}
    )
    try:
        time.sleep(3.0)  # the outage the worker must wait out
        assert worker.proc.poll() is None, worker.output()
        server.start()
        wait_until(
            lambda: app.workers(), 60, what="the worker to register once the database is back"
        )
        assert worker.proc.poll() is None
    finally:
        worker.kill()
        app.close()
