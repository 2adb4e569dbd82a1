"""Fixtures of the fleet tests: the workflows of one queue, a run held until
released, and a stack of workers stopped after the test.

A test module using ``define`` names its queue in a module constant ``QUEUE``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

import perdure


@pytest.fixture
def release() -> threading.Event:
    """Set to let the runs of ``held`` finish."""
    return threading.Event()


@pytest.fixture
def define(
    app: perdure.App, release: threading.Event, request: pytest.FixtureRequest
) -> perdure.App:
    """The workflows of the module's queue (``QUEUE``): ``quick`` and ``held`` (until released)."""
    queue = request.module.QUEUE

    @app.workflow("quick", queue=queue)
    async def quick(ctx: perdure.Context, value: int) -> int:
        return await ctx.step("double", lambda: value * 2)

    @app.workflow("held", queue=queue)
    async def held(ctx: perdure.Context) -> str:
        return await ctx.step("wait", lambda: "released" if release.wait(30) else "timed out")

    return app


@pytest.fixture
def stack(release: threading.Event) -> Iterator[ExitStack]:
    """Workers entered here are stopped after the test, the held runs released first."""
    with ExitStack() as stack:
        stack.callback(release.set)
        yield stack
