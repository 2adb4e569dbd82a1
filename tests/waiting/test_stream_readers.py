"""A stream reader left early: by a timeout, a break, or garbage collection."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import perdure
from perdure import testing


def _open_stream(app: perdure.App) -> perdure.RunHandle:
    """A run whose stream ``out`` stays open: the run is never worked on."""

    @app.workflow("talker")
    async def talker(ctx: perdure.Context) -> Any:
        await ctx.write_stream("out", "never")

    return app.start("talker")


def test_async_reader_of_an_open_stream_times_out_and_closes(app: perdure.App) -> None:
    handle = _open_stream(app)

    async def read() -> list[str]:
        # Each timeout cancels a read still running on the App's loop; closing
        # the reader then waits for it instead of failing with "aclose():
        # asynchronous generator is already running".
        seen = []
        for _ in range(20):
            reader = app.read_stream_async(handle.id, "out")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(reader), 0.05)
            await reader.aclose()
            seen.append("timed out")
        return seen

    assert asyncio.run(read()) == ["timed out"] * 20


def test_a_reader_left_by_break_or_dropped_lets_the_next_read_from_the_start(
    app: perdure.App,
) -> None:
    @app.workflow("counter")
    async def counter(ctx: perdure.Context) -> Any:
        for n in range(3):
            await ctx.write_stream("out", n)
        await ctx.close_stream("out")

    handle = app.start("counter")
    testing.drain(app)
    first = []
    for value in app.read_stream(handle.id, "out"):
        first.append(value)
        break
    assert first == [0]
    dropped = app.read_stream(handle.id, "out")
    assert next(dropped) == 0
    del dropped
    gc.collect()
    assert list(app.read_stream(handle.id, "out")) == [0, 1, 2]
