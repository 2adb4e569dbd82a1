"""A private event loop in a daemon thread: the sync API's way into async code.

perdure is written once, in asyncio. The sync methods of [`App`][perdure.App]
submit the same coroutines to this loop and wait; the async methods await them
through ``asyncio.wrap_future``, so cancelling the caller's task cancels
the work too. Database pools live on this loop only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """One background event loop, started on first use."""

    def __init__(self) -> None:
        """Create the portal; the thread starts lazily."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The portal's loop, started if needed."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="perdure-portal", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    @property
    def started(self) -> bool:
        """Whether the portal's loop runs (a call started it and no close ended it)."""
        return self._loop is not None

    def is_running_here(self) -> bool:
        """Whether the calling code runs on the portal's loop."""
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal loop and block until it is done (Ctrl-C cancels it)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self._loop:
            coro.close()
            raise RuntimeError("a sync perdure call cannot be made from perdure's own loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C while waiting: stop the work too
            raise

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the portal loop; cancelling this cancels it."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        """Stop the loop and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
