"""``async with perdure.App(...)`` closes the App through ``close_async``, off the loop."""

from __future__ import annotations

import asyncio
import threading

import perdure


def _define(app: perdure.App) -> None:
    @app.workflow("echo")
    def echo(ctx: perdure.SyncContext, value: int) -> int:
        return value


def test_async_with_closes_the_app(pg_url: str, schema: str) -> None:
    async def main() -> perdure.App:
        async with perdure.App(pg_url, schema=schema) as app:
            _define(app)
            handle = await app.start_async("echo", 1, key="e:1")
            assert (await app.get_run_async(handle.id)).id == handle.id
            assert app._core.store is not None and app._core.portal.started
        return app

    app = asyncio.run(main())
    assert app._core.store is None
    assert not app._core.portal.started
    app.close()  # closing again does nothing


def test_close_async_leaves_the_callers_loop_free(pg_url: str, schema: str) -> None:
    app = perdure.App(pg_url, schema=schema)
    _define(app)

    async def main() -> list[bool]:
        await app.start_async("echo", 1)
        gate = threading.Event()
        released: list[bool] = []
        # The portal's loop is held until the gate opens (10 s at most).
        app._core.portal.loop.call_soon_threadsafe(lambda: released.append(gate.wait(10)))
        closing = asyncio.create_task(app.close_async())
        await asyncio.sleep(0)  # close_async runs up to its first wait
        assert not closing.done()
        gate.set()  # this loop still runs while the App closes
        await asyncio.wait_for(closing, 20)
        return released

    assert asyncio.run(main()) == [True]
    assert app._core.store is None and not app._core.portal.started
