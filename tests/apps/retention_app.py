"""Workflows for the retention tests: ``perdure worker apps.retention_app:app``.

:func:`define` puts the same workflows on any App, so that a test can make
old runs with a virtual clock in the past and a worker process can serve the
same names.
"""

from __future__ import annotations

import time
from typing import Any

import perdure


def _slow_double(x: int) -> int:
    time.sleep(0.02)
    return 2 * x


def _refuse(x: int) -> None:
    raise perdure.PermanentError(f"{x} is refused")


def define(app: perdure.App) -> None:
    """Define the retention tests' workflows on ``app``."""

    @app.workflow("work")
    def work(ctx: perdure.SyncContext, x: int) -> int:
        """A few steps that take a little while: the live workload."""
        a = ctx.step("one", _slow_double, x)
        b = ctx.step("two", _slow_double, a)
        return int(ctx.step("three", _slow_double, b))

    @app.workflow("refused")
    def refused(ctx: perdure.SyncContext, x: int) -> None:
        """Fails for good at its first step."""
        ctx.step("refuse", _refuse, x)

    @app.workflow("waiter")
    async def waiter(ctx: perdure.Context, x: int) -> Any:
        """Waits for signal "go", then returns it."""
        await ctx.step("before", _slow_double, x)
        return await ctx.wait_for_signal("go", timeout=365 * 86400)

    @app.workflow("parent_leaves")
    async def parent_leaves(ctx: perdure.Context, x: int) -> str:
        """Starts a waiter child and completes without waiting for it."""
        child = await ctx.start_child("waiter", x)
        return child.run_id

    @app.workflow("parent_stays")
    async def parent_stays(ctx: perdure.Context, x: int) -> Any:
        """Waits for a child that completes, then waits for signal "go" itself."""
        child = await ctx.start_child("work", x)
        done = await child.result()
        return [done, await ctx.wait_for_signal("go", timeout=365 * 86400)]


app = perdure.App()
define(app)
