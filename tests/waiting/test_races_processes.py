"""A race across real worker processes: the worker is SIGKILLed between the winner and
the next step, and the replay on another worker returns the same winner."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from helpers import wait_until

TARGET = "apps.race_app:app"
SHORT_LEASE = ["--lease-seconds", "2", "--poll-seconds", "0.2"]


@pytest.mark.parametrize("winner", ["approve", "reject", "escalate"])
def test_a_killed_worker_replays_the_same_winner(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, winner: str
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    victim = spawn_worker(TARGET, *SHORT_LEASE)
    wait_until(lambda: any(w.name == "decide" for w in app.workflows()), 30, what="registration")
    escalate_after = 1.5 if winner == "escalate" else 3600
    handle = app.start("decide", {"order": 9, "escalate_after": escalate_after})
    wait_until(lambda: handle.status() == "waiting", 30, what="the race")
    if winner == "approve":
        app.signal(handle.id, "approve", {"by": "ann"})
    elif winner == "reject":
        app.emit("order.rejected", {"order": 9})

    def ledger() -> list[tuple[str, int]]:
        return db.execute("SELECT step, pid FROM ledger WHERE run_id = %s", (handle.id,)).fetchall()

    # The race is won and recorded; the next step has begun on the victim.
    wait_until(lambda: len(ledger()) == 1, 30, what="the step after the race")
    victim.kill()  # SIGKILL
    # Every other member arrives now, after the race was decided.
    app.signal(handle.id, "approve", {"by": "bob"})
    app.emit("order.rejected", {"order": 9}, key="late")
    rescuer = spawn_worker(TARGET, *SHORT_LEASE)
    result = handle.result(timeout=60)
    assert result == {"winner": winner, "pid": rescuer.pid}
    # The step ran twice (the kill cut the first short), both times after the same winner.
    assert [step for step, _ in ledger()] == [winner, winner]
    assert {pid for _, pid in ledger()} == {victim.pid, rescuer.pid}
    (race,) = [s for s in app.steps(handle.id) if s.kind == "race"]
    assert race.status == "completed" and race.output["winner"] == winner
    # The losers were not consumed: the signals that lost are pending still.
    pending = [s for s in app.signals(handle.id) if s["consumed_at"] is None]
    consumed = [s for s in app.signals(handle.id) if s["consumed_at"] is not None]
    assert [s["payload"] for s in consumed] == ([{"by": "ann"}] if winner == "approve" else [])
    assert [s["payload"] for s in pending] == [{"by": "bob"}]
    woke = {e["event"].key: e["woke"] for e in app.emitted_events("order.rejected")}
    assert woke.get("late") == []
