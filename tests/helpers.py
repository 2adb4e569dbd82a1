"""Test helpers: waiting with a deadline, worker subprocesses, statements sent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from perdure.engine.observer import Observer

T = TypeVar("T")
TESTS_DIR = Path(__file__).resolve().parent


def wait_until(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


@dataclass
class WorkerProcess:
    """A ``perdure worker`` running as a real subprocess."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        target: str,
        url: str,
        schema: str,
        args: list[str],
        env: dict[str, str],
        prefix: list[str] | None = None,
    ) -> WorkerProcess:
        """Run ``python -m perdure worker target args`` against ``url``/``schema``.

        ``prefix`` runs it through another command, such as ``ip netns exec NAME``.
        """
        log_path = Path(f"/tmp/perdure-worker-{schema}-{time.monotonic_ns()}.log")
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full_env.get("PYTHONPATH", "")])
        full_env["PERDURE_DATABASE_URL"] = url
        full_env["PERDURE_SCHEMA"] = schema
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "perdure", "worker", target, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
            )
        return cls(proc, log_path)

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.proc.pid

    def output(self) -> str:
        """Everything the worker printed so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the worker."""
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the worker (if alive) and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker at once (two SIGTERMs), SIGKILL it if it is still there after
        ``timeout`` s, and reap it.

        A worker that exits this way saves what it measured of the coverage; a
        SIGKILLed one cannot.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            # The second signal hands in-flight runs back instead of waiting.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.2)
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        self.kill()

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the worker to exit; its exit code."""
        return self.proc.wait(timeout=timeout)


class RecordingObserver(Observer):
    """An observer that records every hook the engine calls on it: ``(hook, args)``, in order.

    Tests count and read these instead of parsing logs: ``count("worker_idle")``,
    ``args("ranked")``. Token-returning hooks return None.
    """

    def __init__(self) -> None:
        """Record nothing yet."""
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def count(self, hook: str) -> int:
        """How many times ``hook`` was called."""
        return sum(1 for name, _ in list(self.calls) if name == hook)

    def args(self, hook: str) -> list[tuple[Any, ...]]:
        """The arguments of each call of ``hook``, oldest first."""
        return [args for name, args in list(self.calls) if name == hook]


def _recording(hook: str) -> Callable[..., None]:
    def record(self: RecordingObserver, *args: Any) -> None:
        self.calls.append((hook, args))  # list.append is atomic: hooks run on several threads

    record.__name__ = hook
    return record


for _hook in [name for name in vars(Observer) if not name.startswith("_")]:
    setattr(RecordingObserver, _hook, _recording(_hook))


class BackgroundWorker:
    """An in-process worker running on its own thread and event loop."""

    def __init__(self, app: object, **options: Any) -> None:
        """Start a worker of ``app`` with ``options`` (see perdure.WorkerOptions).

        Its :attr:`recorder` (a :class:`RecordingObserver`) hears every hook.
        """
        import asyncio
        import threading

        self.recorder = RecordingObserver()
        observers = [*options.pop("observers", ()), self.recorder]
        self.worker = app.worker(observers=observers, **options)  # type: ignore[attr-defined]
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None

        def serve() -> None:
            try:
                self.loop.run_until_complete(self.worker.run())
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
            finally:
                self.loop.close()

        self.thread = threading.Thread(target=serve, name="test-worker", daemon=True)
        self.thread.start()

    def count(self, hook: str) -> int:
        """How many times the worker's observers heard ``hook`` (an Observer method)."""
        return self.recorder.count(hook)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully and wait for the thread; re-raise a crash of the worker."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
            self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop in time"
        if self.error is not None:
            raise self.error

    def __enter__(self) -> BackgroundWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Sent:
    """One statement this process sent through psycopg: its text and parameters."""

    query: str
    params: Any


@contextlib.contextmanager
def sent_statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sent]]:
    """Record every statement this process sends through psycopg while the block runs.

    It watches the driver's cursors, the boundary every statement crosses, so
    it sees what the App sends whatever its internals look like.
    """
    sent: list[Sent] = []
    plain, awaited = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append(Sent(str(query), params))
        return plain(self, query, params, **kwargs)

    async def execute_async(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append(Sent(str(query), params))
        return await awaited(self, query, params, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", execute)
        patch.setattr(psycopg.AsyncCursor, "execute", execute_async)
        yield sent


@contextlib.contextmanager
def queue_settings_locked(url: str, schema: str) -> Iterator[None]:
    """Hold the queue settings table in EXCLUSIVE mode from another connection.

    Plain reads go on; a claim that locks queue rows (the path for global
    limits) waits until the block ends.
    """
    with psycopg.connect(url) as conn:
        conn.execute(f"LOCK TABLE {schema}.queues IN EXCLUSIVE MODE")
        yield
        conn.rollback()


def claimed_while_queue_settings_locked(
    url: str, schema: str, start: Callable[[], Any], attempts: int = 10
) -> None:
    """Show that a worker claims without locking: a run ends while the queue settings are locked.

    ``start`` starts one run and returns its handle. A claim that looks under
    the queue locks (a worker's first, or one after work was left behind)
    waits for the lock: then the lock is let go, the run finishes, and the
    next run tries again. Fails when no run gets through in ``attempts``.
    """
    from perdure.errors import ResultTimeout

    for _ in range(attempts):
        with queue_settings_locked(url, schema):
            handle = start()
            try:
                handle.result(timeout=3)
                return
            except ResultTimeout:
                pass
        handle.result(timeout=30)
    raise AssertionError(f"no claim got through the locked queue settings in {attempts} tries")
