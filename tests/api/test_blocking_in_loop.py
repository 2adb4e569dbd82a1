"""A blocking call made on a thread whose event loop runs is refused at once.

``run.result()`` in an ``async def`` workflow or step, or in a FastAPI
handler, would hold that loop (the worker's, the server's) until the call
returned: every sync form raises ``BlockingCallInEventLoop`` instead, naming
the async form to await. Sync steps and ``def`` workflows run on worker
threads, without a loop, and keep their blocking calls.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import perdure
from perdure.integrations import fastapi as perdure_fastapi
from perdure.testing import drain

#: The timeout given to the refused calls: they must fail well before it.
TIMEOUT = 8.0
#: How long a refusal may take at most ("at once", with room for a slow machine).
AT_ONCE = 1.0


def _attempt(call: Any) -> dict[str, Any]:
    """Make ``call()``; what it raised, and how long it took."""
    began = time.monotonic()
    try:
        call()
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc), "took": time.monotonic() - began}
    return {"error": None, "message": "", "took": time.monotonic() - began}


def _refused(outcome: dict[str, Any], use: str) -> None:
    assert outcome["error"] == "BlockingCallInEventLoop", outcome
    assert use in outcome["message"], outcome
    assert outcome["took"] < AT_ONCE, outcome


def _waiting(app: perdure.App) -> perdure.RunHandle:
    """A run that waits for a signal, so that waiting for its result would block."""

    @app.workflow("parked")
    async def parked(ctx: perdure.Context) -> str:
        return str(await ctx.wait_for_signal("go"))

    run = app.start("parked")
    drain(app)
    return run


def test_an_async_workflow_body_is_refused_run_result_at_once(app: perdure.App) -> None:
    parked = _waiting(app)

    @app.workflow("impatient")
    async def impatient(ctx: perdure.Context) -> dict[str, Any]:
        return _attempt(lambda: parked.result(timeout=TIMEOUT))

    began = time.monotonic()
    outcome = app.run_until_complete(app.start("impatient"))
    _refused(outcome, "use await run.result_async() instead")
    assert time.monotonic() - began < TIMEOUT
    assert parked.status() == perdure.RunStatus.WAITING


def test_an_async_step_is_refused_app_signal_and_start_at_once(app: perdure.App) -> None:
    parked = _waiting(app)

    async def probe() -> list[dict[str, Any]]:
        return [
            _attempt(lambda: app.signal(parked.id, "go", "now")),
            _attempt(lambda: app.start("parked")),
            _attempt(lambda: list(app.read_stream(parked.id, "s"))),
        ]

    @app.workflow("stepper")
    async def stepper(ctx: perdure.Context) -> list[dict[str, Any]]:
        return list(await ctx.step("probe", probe))

    signal, start, stream = app.run_until_complete(app.start("stepper"))
    _refused(signal, "use await app.signal_async() instead")
    _refused(start, "use await app.start_async() instead")
    _refused(stream, "use async for ... in app.read_stream_async() instead")
    assert parked.status() == perdure.RunStatus.WAITING  # the refused signal was not sent
    assert sum(app.count_runs(perdure.RunFilter(workflow="parked")).values()) == 1  # no start


def test_a_fastapi_handler_is_refused_at_once_and_answers(app: perdure.App) -> None:
    parked = _waiting(app)
    api = FastAPI()
    perdure_fastapi.add_error_handlers(api)

    @api.get("/blocking")
    async def blocking() -> dict[str, Any]:
        return {"result": parked.result(timeout=TIMEOUT)}

    @api.get("/awaiting")
    async def awaiting() -> dict[str, Any]:
        return {"status": (await parked.status_async()).value}

    with TestClient(api) as client:
        began = time.monotonic()
        refused = client.get("/blocking")
        took = time.monotonic() - began
        assert refused.status_code == 500
        assert refused.json()["error"] == "BlockingCallInEventLoop"
        assert "use await run.result_async() instead" in refused.json()["detail"]
        assert took < AT_ONCE, took
        assert client.get("/awaiting").json() == {"status": "waiting"}


def test_sync_steps_and_def_workflows_still_block_on_their_threads(app: perdure.App) -> None:
    parked = _waiting(app)

    def read_status() -> str:  # a plain step: on a worker thread, no loop
        return parked.status().value

    @app.workflow("plain")
    def plain(ctx: perdure.SyncContext) -> dict[str, Any]:
        seen = ctx.step("read_status", read_status)
        signalled = app.signal(parked.id, "go", "from a def workflow")
        return {"seen": seen, "signalled": signalled is not None}

    @app.workflow("mixed")
    async def mixed(ctx: perdure.Context) -> str:
        return str(await ctx.step("read_status", read_status))

    assert app.run_until_complete(app.start("mixed")) == "waiting"
    assert app.run_until_complete(app.start("plain"))["seen"] == "waiting"
    drain(app)
    assert parked.result(timeout=TIMEOUT) == "from a def workflow"


def test_the_sync_forms_of_a_running_loop_name_their_async_twins(app: perdure.App) -> None:
    """Every sync form of App and RunHandle is refused under a loop, before any I/O."""
    handle = perdure.RunHandle(app, "00000000-0000-0000-0000-000000000000")
    calls = {
        "await app.start_async()": lambda: app.start("nothing"),
        "await app.list_runs_async()": app.list_runs,
        "await app.run_until_complete_async()": lambda: app.run_until_complete(handle),
        "await app.run_worker_async()": app.run_worker,
        "await app.worker_async()": app.worker,
        "await run.get_async()": handle.get,
        "await run.status_async()": handle.status,
        "await run.result_async()": lambda: handle.result(timeout=TIMEOUT),
    }

    async def under_a_loop() -> dict[str, dict[str, Any]]:
        return {use: _attempt(call) for use, call in calls.items()}

    for use, outcome in asyncio.run(under_a_loop()).items():
        _refused(outcome, f"use {use} instead")
    with pytest.raises(perdure.RunNotFound):  # without a loop, the same call goes through
        handle.status()
