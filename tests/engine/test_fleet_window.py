"""An idle worker beyond the first of its queue holds no LISTEN at all.

PostgreSQL signals every session of the database that holds a LISTEN for
each notification, whatever the channel, so a worker that listened only on a
channel of its own still cost the server something for every start. Only the
first WINDOW workers of a queue, and workers with work in hand, listen on
their own channel; their rows say so, and a call passed on by a full worker
goes only to one of them. An idle worker beyond them learns of work left
waiting at its heartbeat. Here WINDOW is 4 so that a handful of workers shows it.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.engine import attendance

WINDOW = 4
QUEUE = "window"


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window of WINDOW workers instead of the default."""
    monkeypatch.setattr(attendance, "WINDOW", WINDOW)


def _worker(app: perdure.App, wid: str) -> BackgroundWorker:
    # A lease of 4 s: an idle worker beats every 2 s (half a lease).
    return BackgroundWorker(
        app, worker_id=wid, concurrency=1, idle_poll_seconds=60.0, lease_seconds=4.0
    )


def _rows(url: str, schema: str) -> dict[str, bool]:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(f"SELECT id, listening FROM {schema}.workers WHERE status = 'running'")
        return {wid: listening for wid, listening in found.fetchall()}


def _hears(worker: BackgroundWorker) -> tuple[bool, bool]:
    wakeup = worker.worker.attendance._wakeup
    assert wakeup is not None
    return wakeup.listening_shared, wakeup.listening_own


def _settled(fleet: dict[str, BackgroundWorker], url: str, schema: str) -> bool:
    """Whether the first WINDOW workers listen on their own channel and the rest on
    nothing, and the rows say the same."""
    rows = _rows(url, schema)
    for place, (wid, worker) in enumerate(fleet.items()):
        beats = worker.recorder.args("ranked")
        if not beats or beats[-1][1].get("window") != place:
            return False
        own = place < WINDOW
        if _hears(worker)[1] != own or rows.get(wid) != own:
            return False
        if not own and _hears(worker)[0]:
            return False
    return True


def test_idle_workers_beyond_the_window_hold_no_listen_and_hear_no_start(
    define: perdure.App, stack: ExitStack, pg_url: str, schema: str
) -> None:
    app = define
    wids = ("w1", "w2", "w3", "w4", "w5", "w6")
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in wids}
    wait_until(lambda: _settled(fleet, pg_url, schema), 30, what="the fleet's places")
    quiet = {wid: w.worker.wake_checks.copy() for wid, w in fleet.items()}
    for value in range(5):
        assert app.start("quick", value).result(timeout=20) == value * 2
    for wid in ("w5", "w6"):
        assert fleet[wid].worker.wake_checks == quiet[wid], wid
        assert fleet[wid].count("execution_started") == 0, wid


def test_a_full_window_passes_calls_on_only_to_workers_that_listen_and_the_rest_look_at_their_beat(
    define: perdure.App, stack: ExitStack, release: threading.Event, pg_url: str, schema: str
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3", "w4")}
    held = [app.start("held") for _ in fleet]
    wait_until(
        lambda: all(len(w.worker.running) == 1 for w in fleet.values()),
        20,
        what="each worker of the window to hold a blocking run",
    )
    fleet["w5"] = stack.enter_context(_worker(app, "w5"))
    wait_until(
        lambda: _rows(pg_url, schema).get("w5") is False and _hears(fleet["w5"]) == (False, False),
        30,
        what="w5 to stop listening, and its row to say so",
    )
    forwarded = sum(w.worker.attendance.forwarded for w in fleet.values())
    # The window is full and passes the call along itself; w5 hears nothing
    # and polls once a minute: its heartbeat (every 2 s) finds the run.
    assert app.start("quick", 5).result(timeout=10) == 10
    assert fleet["w5"].count("execution_finished") == 1
    assert sum(w.worker.attendance.forwarded for w in fleet.values()) > forwarded
    release.set()
    assert [h.result(timeout=20) for h in held] == ["released"] * 4


def test_a_worker_beyond_the_window_listens_while_it_has_work_in_hand(
    define: perdure.App, stack: ExitStack, release: threading.Event, pg_url: str, schema: str
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3", "w4", "w5")}
    wait_until(lambda: _settled(fleet, pg_url, schema), 30, what="the fleet's places")
    held = []
    for count in range(1, 6):  # one at a time: the fifth finds the window full
        held.append(app.start("held"))
        wait_until(
            lambda c=count: sum(len(w.worker.running) for w in fleet.values()) == c,
            20,
            what=f"{count} workers to hold a blocking run",
        )
    assert len(fleet["w5"].worker.running) == 1
    wait_until(lambda: _hears(fleet["w5"])[1], 10, what="w5 to listen with work in hand")
    wait_until(lambda: _rows(pg_url, schema).get("w5") is True, 20, what="w5's row to say so")
    release.set()
    assert [h.result(timeout=20) for h in held] == ["released"] * 5
    wait_until(lambda: _settled(fleet, pg_url, schema), 30, what="w5 to stop listening, idle")


def test_a_burst_of_starts_reaches_every_idle_worker_of_the_window_at_once(
    define: perdure.App, stack: ExitStack, release: threading.Event, pg_url: str, schema: str
) -> None:
    app = define
    fleet = {wid: stack.enter_context(_worker(app, wid)) for wid in ("w1", "w2", "w3", "w4")}
    wait_until(lambda: _settled(fleet, pg_url, schema), 30, what="the fleet's places")
    # Four starts at once: notifications that come while a check is pending
    # are covered by it, so a worker filled by the call it heard passes on
    # what is still due; none waits for its poll (a minute here).
    held = [app.start("held") for _ in fleet]
    wait_until(
        lambda: all(len(w.worker.running) == 1 for w in fleet.values()),
        5,
        what="each worker to hold a blocking run",
    )
    release.set()
    assert [h.result(timeout=20) for h in held] == ["released"] * 4
