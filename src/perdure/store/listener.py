"""A blocking session that LISTENs, and runs short statements between notifications.

A worker keeps one of these on its own thread, over the direct URL (LISTEN
needs a session): it carries the worker's wakeups and its heartbeats, so that
both go on while the worker's event loop is busy or blocked.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from perdure.store.loaders import ADAPTERS
from perdure.store.statement import Statement
from perdure.store.store import execute_sync

T = TypeVar("T")


class Listener:
    """One direct connection LISTENing on a channel; a context manager."""

    def __init__(
        self, url: str, channel: str | None, application_name: str, connect_timeout: int = 5
    ) -> None:
        """Connect to ``url`` and LISTEN on ``channel`` once entered (on none yet if None)."""
        self.url = url
        self.channel = channel
        self.application_name = application_name
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> Listener:
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            application_name=self.application_name,
            connect_timeout=self.connect_timeout,
            context=ADAPTERS,
        )
        try:
            if self.channel is not None:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return self

    def __exit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The open connection (inside the ``with`` block only)."""
        if self._conn is None:
            raise RuntimeError("the listener is not connected")
        return self._conn

    def wait(self, timeout: float) -> str | None:
        """Wait up to ``timeout`` s for a notification; its payload (None if none came)."""
        came = self.wait_on(timeout)
        return None if came is None else came[1]

    def wait_on(self, timeout: float, interrupt: int | None = None) -> tuple[str, str] | None:
        """Wait up to ``timeout`` s for a notification; its channel and payload.

        With ``interrupt`` (a file descriptor, such as a pipe's read end), the
        wait also ends, with None, as soon as that descriptor becomes readable:
        another thread stops this one at once instead of after its timeout.
        """
        if interrupt is None:
            return self._take(timeout)
        came = self._take(0.0)  # any received while a statement ran
        if came is not None:
            return came
        socket = self.conn.fileno()
        poll = select.poll()
        poll.register(socket, select.POLLIN)
        poll.register(interrupt, select.POLLIN)
        ready = poll.poll(max(timeout, 0.0) * 1000.0)
        if any(fd == socket for fd, _ in ready):
            return self._take(0.0)
        return None

    def _take(self, timeout: float) -> tuple[str, str] | None:
        for came in self.conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
            return came.channel, came.payload
        return None

    def listen(self, channel: str, *, on: bool = True) -> None:
        """LISTEN on one more ``channel`` (or, with ``on=False``, UNLISTEN it)."""
        verb = "LISTEN {}" if on else "UNLISTEN {}"
        self.conn.execute(sql.SQL(verb).format(sql.Identifier(channel)))

    def execute(self, stmt: Statement[T]) -> T:
        """Run one statement (its own transaction)."""
        return execute_sync(self.conn, stmt)

    def execute_together(self, stmts: Sequence[Statement[Any]]) -> list[Any]:
        """Run ``stmts`` in one transaction; their decoded results, in order."""
        with self.conn.transaction():
            return [execute_sync(self.conn, stmt) for stmt in stmts]
