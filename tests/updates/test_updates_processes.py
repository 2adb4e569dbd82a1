"""Updates across real worker processes: a worker SIGKILLed mid-update still replies once."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from click.testing import CliRunner

import perdure
from helpers import wait_until
from perdure.cli.main import cli

TARGET = "apps.updates_app:app"


def test_a_worker_killed_between_accepting_and_replying_still_replies_once(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    first = spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
    wait_until(lambda: any(w.name == "cart" for w in app.workflows()), 30, what="registration")
    handle = app.start("cart", "hal", key="cart:hal")
    wait_until(lambda: handle.status() == "waiting", 30, what="the wait")
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The caller waits through the crash: one call, one reply.
        reply = pool.submit(
            app.update, "cart:hal", "add_item", "crash", update_id="c-1", timeout=90
        )
        assert first.wait(timeout=60) != 0  # the handler's second step killed it
        (accepted,) = app.updates(handle.id)
        assert accepted["status"] == "accepted" and accepted["result"] is None
        spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
        assert reply.result(timeout=90) == 1
    # A retry with the same id gets the same reply and applies nothing again.
    assert app.update("cart:hal", "add_item", "crash", update_id="c-1", timeout=30) == 1
    app.signal(handle.id, "checkout")
    assert handle.result(timeout=60) == ["crash"]
    steps = dict(db.execute("SELECT step, count(*) FROM ledger GROUP BY step").fetchall())
    # The first step ran once (its checkpoint replayed), the killing one twice.
    assert steps == {"record:crash": 1, "crash-point": 2}
    events = [e.event for e in app.history(handle.id)]
    assert events.count("update_accepted") == 1 and events.count("update_completed") == 1
    (done,) = app.updates(handle.id)
    assert done["status"] == "completed" and done["result"] == 1


def test_an_early_reply_is_written_once_across_a_worker_killed_after_it(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    first = spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
    wait_until(lambda: any(w.name == "cart" for w in app.workflows()), 30, what="registration")
    handle = app.start("cart", "kim", key="cart:kim")
    wait_until(lambda: handle.status() == "waiting", 30, what="the wait")
    # The reply comes before the step that kills the worker.
    assert app.update("cart:kim", "authorise", 5, update_id="a-1", timeout=60) == "authorised 5"
    assert first.wait(timeout=60) != 0
    (replied,) = app.updates(handle.id)
    assert replied["status"] == "completed" and replied["result"] == "authorised 5"
    spawn_worker(TARGET, "--concurrency", "2", "--lease-seconds", "2")
    # The next worker's replay runs the handler on past the reply to its end.
    wait_until(
        lambda: db.execute("SELECT count(*) FROM ledger WHERE step = 'after'").fetchone() == (1,),
        90,
        what="the handler's end",
    )
    app.signal(handle.id, "checkout")
    assert handle.result(timeout=60) == ["paid 5"]
    (done,) = app.updates(handle.id)
    # Neither the replay nor the handler's return value changed the reply.
    assert (done["status"], done["result"]) == ("completed", "authorised 5")
    assert done["completed_at"] == replied["completed_at"]
    events = [e.event for e in app.history(handle.id)]
    assert events.count("update_accepted") == 1 and events.count("update_completed") == 1
    assert app.update("cart:kim", "authorise", 5, update_id="a-1", timeout=30) == "authorised 5"
    steps = dict(db.execute("SELECT step, count(*) FROM ledger GROUP BY step").fetchall())
    assert steps == {"authorise:5": 1, "crash-point": 2, "after": 1}


def test_the_cli_sends_an_update_and_prints_its_reply(
    app: perdure.App, db: psycopg.Connection[Any], spawn_worker: Any, pg_url: str, schema: str
) -> None:
    db.execute("CREATE TABLE ledger (run_id uuid, step text, pid int)")
    spawn_worker(TARGET, "--concurrency", "2")
    wait_until(lambda: any(w.name == "cart" for w in app.workflows()), 30, what="registration")
    handle = app.start("cart", "ivy", key="cart:ivy")
    wait_until(lambda: handle.status() == "waiting", 30, what="the wait")
    runner = CliRunner()
    base = ["--database-url", pg_url, "--schema", schema, "runs", "update"]
    sent = runner.invoke(cli, [*base, "cart:ivy", "add_item", '"tea"', "--id", "t-1", "--json"])
    assert sent.exit_code == 0, sent.output
    assert json.loads(sent.output) == {
        "run": handle.id,
        "update": "add_item",
        "update_id": "t-1",
        "reply": 1,
    }
    again = runner.invoke(cli, [*base, "cart:ivy", "add_item", '"tea"', "--id", "t-1"])
    assert again.exit_code == 0 and again.output.strip() == "1"
    refused = runner.invoke(cli, [*base, "cart:ivy", "add_item", '""'])
    assert refused.exit_code == 1 and "UpdateRejected" in refused.output
    bad = runner.invoke(cli, [*base, "cart:ivy", "add_item", "{not json"])
    assert bad.exit_code == 2 and "PAYLOAD is not valid JSON" in bad.output
    assert [u["status"] for u in app.updates(handle.id)] == ["completed", "rejected"]
    audit = db.execute("SELECT action, outcome FROM audit WHERE action = 'update' ORDER BY id")
    # Each call is audited, the refused and the malformed one as errors.
    outcomes = [r[1] for r in audit.fetchall()]
    assert outcomes == ["ok", "ok", "error", "error"]
