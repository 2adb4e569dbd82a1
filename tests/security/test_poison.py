"""A bad row fails alone (invariant 12): poison written past every door hurts no one else.

Each test writes its poison directly with SQL as the superuser (the test's own
connection), bypassing whatever checks the SQL functions make: a value valid
for PostgreSQL that Python cannot decode (an integer of 5000 digits, arrays
nested 3000 deep) or an infinite time. The run that holds it fails at once with
UndecodablePayload; the runs claimed beside it complete untouched, and every
listing (CLI, HTTP API, dashboard) still answers.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app
from perdure.testing import drain

DB = psycopg.Connection[tuple[Any, ...]]

#: The two undecodable documents, as SQL: valid jsonb both.
POISONS = {
    "integer_of_5000_digits": ("('[' || repeat('9', 5000) || ']')::jsonb", "5000 digits"),
    "arrays_nested_3000_deep": (
        "(repeat('[', 3000) || repeat(']', 3000))::jsonb",
        "nested too deeply",
    ),
}


async def _double(value: int) -> int:
    return value * 2


def _define(app: perdure.App) -> None:
    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: Any) -> Any:
        return await ctx.step("double", _double, value)

    @app.workflow("gated")
    async def gated(ctx: perdure.Context, value: Any) -> Any:
        first = await ctx.step("first", _double, value)
        got = await ctx.wait_for_signal("go")
        return [first, got]

    app.register()


def _history(db: DB, run_id: str) -> list[tuple[str, int | None, Any]]:
    return db.execute(
        "SELECT event, attempt, at FROM history WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()


def _status(db: DB, run_id: str) -> str:
    return str(db.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()[0])  # type: ignore[index]


def _error(db: DB, run_id: str) -> dict[str, Any]:
    found = db.execute("SELECT error::text FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert found is not None and found[0] is not None
    return dict(json.loads(found[0]))


def _assert_failed_alone(db: DB, run_id: str, field: str, reason: str) -> None:
    """The run failed at once (one claim), with UndecodablePayload naming field and reason."""
    assert _status(db, run_id) == "failed"
    error = _error(db, run_id)
    assert error["type"] == "perdure.errors.UndecodablePayload", error
    assert field in error["field"] and reason in error["reason"], error
    events = [event for event, _, _ in _history(db, run_id)]
    assert events.count("run_claimed") == 1, events
    assert "run_failed" in events and "run_retry_scheduled" not in events, events
    assert "lease_expired" not in events, events


def _assert_untouched(db: DB, run_ids: list[str]) -> None:
    """Each run completed on its first claim: no lapse, no lease expiry, no extra attempt."""
    for run_id in run_ids:
        assert _status(db, run_id) == "completed", run_id
        history = _history(db, run_id)
        events = [event for event, _, _ in history]
        assert "lease_expired" not in events and "run_retry_scheduled" not in events, events
        assert all(attempt in (None, 1) for _, attempt, _ in history), history


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poison_input_fails_alone_among_20_runs_claimed_in_one_batch(
    app: perdure.App, db: DB, poison: str
) -> None:
    _define(app)
    runs = [app.start("echo", n).id for n in range(21)]
    bad, innocent = runs[7], runs[:7] + runs[8:]
    value, reason = POISONS[poison]
    db.execute(f"UPDATE runs SET input = {value} WHERE id = %s", (bad,))

    # One claim batch covers all 21 (claim_batch and concurrency above it).
    counts = drain(app, concurrency=32, claim_batch=32)

    _assert_failed_alone(db, bad, "the input", reason)
    _assert_untouched(db, innocent)
    assert counts.get("run_completed") == 20 and counts.get("run_failed") == 1, counts
    assert counts.get("step_started") == 20, counts  # the poison one never ran its step
    # All 21 were claimed by one statement: one transaction time for all.
    claimed_at = {
        row[0]
        for row in db.execute(
            "SELECT at FROM history WHERE event = 'run_claimed' AND run_id = ANY(%s::uuid[])",
            (runs,),
        )
    }
    assert len(claimed_at) == 1, claimed_at
    # The listing reads the poison run as a marker, not an error.
    listed = {run.id: run for run in app.list_runs(limit=100)}
    assert str(listed[bad].input).startswith("undecodable payload: ")


def test_a_poison_checkpoint_fails_its_run_alone(app: perdure.App, db: DB) -> None:
    _define(app)
    bad, good = app.start("gated", 1).id, app.start("gated", 2).id
    drain(app)
    assert _status(db, bad) == _status(db, good) == "waiting"
    value, reason = POISONS["integer_of_5000_digits"]
    db.execute(f"UPDATE steps SET output = {value} WHERE run_id = %s AND position = 0", (bad,))
    app.signal(bad, "go", 1)
    app.signal(good, "go", 2)

    drain(app, concurrency=8, claim_batch=8)

    _assert_failed_alone_after_wait(db, bad, "the output of step 'first'", reason)
    assert _status(db, good) == "completed"
    assert app.get_run(good).output == [4, 2]


def _assert_failed_alone_after_wait(db: DB, run_id: str, field: str, reason: str) -> None:
    """Like _assert_failed_alone, for a run claimed once before its wait and once after."""
    assert _status(db, run_id) == "failed"
    error = _error(db, run_id)
    assert error["type"] == "perdure.errors.UndecodablePayload", error
    assert field in error["field"] and reason in error["reason"], error
    events = [event for event, _, _ in _history(db, run_id)]
    assert events.count("run_claimed") == 2, events
    assert "run_retry_scheduled" not in events and "lease_expired" not in events, events


def test_a_poison_signal_payload_fails_its_run_alone(app: perdure.App, db: DB) -> None:
    _define(app)
    bad, good = app.start("gated", 1).id, app.start("gated", 2).id
    # Sent before the runs wait: kept pending until their wait takes them.
    app.signal(bad, "go", 1)
    app.signal(good, "go", 2)
    value, reason = POISONS["arrays_nested_3000_deep"]
    db.execute(f"UPDATE signals SET payload = {value} WHERE run_id = %s", (bad,))

    drain(app, concurrency=8, claim_batch=8)

    _assert_failed_alone(db, bad, "the payload of signal 'go'", reason)
    assert _status(db, good) == "completed"
    assert app.get_run(good).output == [4, 2]


def _plant_bad_rows(app: perdure.App, db: DB) -> tuple[str, str]:
    """A run whose every time is infinite, and one whose input cannot be decoded."""
    _define(app)
    infinite = app.start("gated", 1).id
    undecodable = app.start("echo", 2).id
    drain(app)
    app.signal(infinite, "go", 3)
    db.execute(
        "UPDATE runs SET created_at = 'infinity', updated_at = '-infinity', "
        "started_at = 'infinity', deadline_at = 'infinity' WHERE id = %s",
        (infinite,),
    )
    db.execute("UPDATE tasks SET available_at = 'infinity' WHERE run_id = %s", (infinite,))
    db.execute("UPDATE signals SET created_at = 'infinity' WHERE run_id = %s", (infinite,))
    db.execute("UPDATE history SET at = '-infinity' WHERE run_id = %s", (infinite,))
    db.execute("UPDATE steps SET started_at = '-infinity' WHERE run_id = %s", (infinite,))
    value, _ = POISONS["integer_of_5000_digits"]
    db.execute(f"UPDATE runs SET input = {value}, output = {value} WHERE id = %s", (undecodable,))
    return infinite, undecodable


def test_runs_list_and_show_on_the_command_line_read_bad_rows(
    app: perdure.App, db: DB, pg_url: str, schema: str
) -> None:
    infinite, undecodable = _plant_bad_rows(app, db)

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, *args], catch_exceptions=False
        )

    table = invoke("runs", "list")
    assert table.exit_code == 0, table.output
    assert infinite[:8] in table.output and undecodable[:8] in table.output
    listed = invoke("runs", "list", "--json")
    assert listed.exit_code == 0, listed.output
    by_id = {run["id"]: run for run in json.loads(listed.output)["runs"]}
    assert by_id[infinite]["created_at"] == "infinity"
    assert by_id[infinite]["updated_at"] == "-infinity"
    assert by_id[undecodable]["input"] == "undecodable payload: an integer with 5000 digits"
    for run_id in (infinite, undecodable):
        shown = invoke("runs", "show", run_id)
        assert shown.exit_code == 0, shown.output
    assert "infinity" in invoke("runs", "show", infinite).output
    assert "5000 digits" in invoke("runs", "show", undecodable).output


def test_the_http_api_answers_with_bad_rows(app: perdure.App, db: DB) -> None:
    infinite, undecodable = _plant_bad_rows(app, db)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        listed = client.get("/api/v1/runs")
        assert listed.status_code == 200, listed.text
        items = listed.json()
        rows = items["runs"] if isinstance(items, dict) else items
        by_id = {run["id"]: run for run in rows}
        assert by_id[infinite]["created_at"] == "infinity"
        assert "5000 digits" in json.dumps(by_id[undecodable])
        for run_id in (infinite, undecodable):
            one = client.get(f"/api/v1/runs/{run_id}")
            assert one.status_code == 200, one.text


def test_the_dashboard_pages_show_bad_rows(app: perdure.App, db: DB) -> None:
    infinite, undecodable = _plant_bad_rows(app, db)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        for path in ("/", "/runs", f"/runs/{infinite}", f"/runs/{undecodable}"):
            page = client.get(path, headers={"accept": "text/html"})
            assert page.status_code == 200, (path, page.text[-2000:])
        assert "5000 digits" in client.get(f"/runs/{undecodable}").text
        assert "infinity" in client.get(f"/runs/{infinite}").text


def _drain_on_thread(app: perdure.App, seconds: float, **options: Any) -> dict[str, int]:
    """drain(app) on a thread; fail if it has not returned within ``seconds``."""
    done: list[dict[str, int]] = []
    thread = threading.Thread(target=lambda: done.append(drain(app, **options)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the claim loop did not come back within {seconds} s"
    return done[0]


# PostgreSQL 15 cannot subtract infinite times (17 can): run on both.
@pytest.mark.all_servers
@pytest.mark.parametrize("when", ["infinity", "-infinity"])
def test_a_timer_at_an_infinite_time_does_not_break_the_claim_loop(
    app: perdure.App, db: DB, when: str
) -> None:
    _define(app)
    timer = app.start("echo", 1).id
    db.execute("UPDATE tasks SET available_at = %s WHERE run_id = %s", (when, timer))
    others = [app.start("echo", n).id for n in range(2, 6)]

    _drain_on_thread(app, 60)

    _assert_untouched(db, others)
    if when == "infinity":
        # Never due: it waits, and the worker knows when next to look (never).
        assert _status(db, timer) == "queued"
        core: Any = app._core
        stmt = core.statements.tasks.next_due("any", ["echo"], ["echo"], [1])
        due = core.portal.call(core.run(stmt))
        assert due == float("inf")
    else:
        assert _status(db, timer) == "completed"
    # The next worker's wake-up is not broken either: a new run completes.
    late = app.start("echo", 9).id
    _drain_on_thread(app, 60)
    assert _status(db, late) == "completed"


@pytest.mark.all_servers
def test_a_run_started_at_an_infinite_time_completes_beside_the_others(
    app: perdure.App, db: DB
) -> None:
    # Its completion's duration cannot be computed; it must not fail the
    # group commit that carries the other runs' completions.
    _define(app)
    bad, good = app.start("gated", 1).id, app.start("gated", 2).id
    drain(app)
    db.execute("UPDATE runs SET started_at = 'infinity' WHERE id = %s", (bad,))
    app.signal(bad, "go", 1)
    app.signal(good, "go", 2)

    drain(app, concurrency=8, claim_batch=8)

    assert _status(db, bad) == _status(db, good) == "completed"
    assert [e for e, _, _ in _history(db, bad)].count("lease_expired") == 0


def test_a_poison_child_output_fails_its_parent_not_as_text(app: perdure.App, db: DB) -> None:
    _define(app)

    @app.workflow("parent")
    async def parent(ctx: perdure.Context, value: Any) -> Any:
        child = await ctx.start_child("echo", value)
        try:
            return await child.result()
        except Exception:
            return "swallowed"  # the poison is not the parent's to swallow

    app.register()
    value, reason = POISONS["integer_of_5000_digits"]
    # A bug that writes an unreadable output when a child completes.
    db.execute(
        "CREATE FUNCTION poison_output() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"NEW.output := {value}; RETURN NEW; END $$"
    )
    db.execute(
        "CREATE TRIGGER poison_output BEFORE UPDATE ON runs FOR EACH ROW "
        "WHEN (NEW.status = 'completed' AND NEW.workflow = 'echo') "
        "EXECUTE FUNCTION poison_output()"
    )
    bad, direct = app.start("parent", 1).id, app.start("echo", 2).id

    drain(app, concurrency=8, claim_batch=8)

    assert _status(db, bad) == "failed"
    error = _error(db, bad)
    assert error["type"] == "perdure.errors.UndecodablePayload", error
    assert "the output of child run" in error["field"] and reason in error["reason"], error
    # The parent's history holds no marker text passed off as the child's output.
    assert db.execute(
        "SELECT count(*) FROM steps WHERE run_id = %s AND output::text LIKE '%%undecodable%%'",
        (bad,),
    ).fetchone() == (0,)
    # Asked for its result, a run whose output is poison answers with the typed error.
    with pytest.raises(perdure.UndecodablePayload, match="5000 digits"):
        app.handle(direct).result(timeout=5)


def test_a_run_poisoned_while_its_gather_runs_fails_alone(app: perdure.App, db: DB) -> None:
    _define(app)
    tried: set[int] = set()

    async def flaky(n: int) -> int:
        if n not in tried:  # each step fails once: its task goes back to the queue
            tried.add(n)
            raise RuntimeError("once")
        return n

    retry = perdure.RetryPolicy(initial_delay=0.5, jitter=0.0)

    @app.workflow("fanned")
    async def fanned(ctx: perdure.Context, value: Any) -> Any:
        return await ctx.gather(*(ctx.step(f"part{n}", flaky, n, retry=retry) for n in range(4)))

    app.register()
    bad = app.start("fanned", 1).id
    drain(app)
    ready = db.execute(
        "SELECT count(*) FROM tasks WHERE run_id = %s AND kind = 'step' AND status = 'ready'",
        (bad,),
    ).fetchone()
    assert ready == (4,) and _status(db, bad) == "waiting", ready
    value, reason = POISONS["integer_of_5000_digits"]
    db.execute(f"UPDATE runs SET input = {value} WHERE id = %s", (bad,))
    # The step tasks are due now; the run's own task waits for them.
    db.execute("UPDATE tasks SET available_at = now() WHERE run_id = %s AND kind = 'step'", (bad,))
    others = [app.start("echo", n).id for n in range(5)]

    # The step tasks are claimed beside the others: the first one fails the run.
    _drain_on_thread(app, 60, concurrency=16, claim_batch=16)

    assert _status(db, bad) == "failed", _history(db, bad)
    error = _error(db, bad)
    assert error["type"] == "perdure.errors.UndecodablePayload", error
    assert reason in error["reason"], error
    events = [event for event, _, _ in _history(db, bad)]
    assert "lease_expired" not in events, events
    assert db.execute("SELECT count(*) FROM tasks WHERE run_id = %s", (bad,)).fetchone() == (0,)
    _assert_untouched(db, others)


def test_a_compensating_run_with_an_undecodable_error_ends_without_a_lapse(
    app: perdure.App, db: DB
) -> None:
    _define(app)
    bad = app.start("gated", 1).id
    drain(app)
    value, _ = POISONS["arrays_nested_3000_deep"]
    # Its failure was recorded, then spoiled; its compensations are due.
    db.execute(f"UPDATE runs SET status = 'compensating', error = {value} WHERE id = %s", (bad,))
    db.execute("UPDATE tasks SET available_at = now() WHERE run_id = %s", (bad,))

    _drain_on_thread(app, 60)

    assert _status(db, bad) == "failed"
    events = [event for event, _, _ in _history(db, bad)]
    assert "lease_expired" not in events and events.count("run_claimed") == 2, events
