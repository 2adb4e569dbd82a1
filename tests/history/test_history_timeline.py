"""The history records every run and step transition: who, when, attempt, error, duration."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
from click.testing import CliRunner

import perdure
from perdure.cli.main import cli
from perdure.testing import drain

WORKER = "worker-hist"


def define(app: perdure.App, calls: dict[str, int]) -> None:
    """A run whose first step fails once then succeeds, and whose second step fails for good."""

    def flaky() -> str:
        calls["flaky"] = calls.get("flaky", 0) + 1
        if calls["flaky"] == 1:
            raise RuntimeError("flaky the first time")
        return "ok"

    def broken() -> None:
        raise perdure.PermanentError("broken for good")

    @app.workflow("timeline")
    def timeline(ctx: perdure.SyncContext, x: int) -> None:
        again = perdure.RetryPolicy(max_attempts=3, initial_delay=0, jitter=0)
        ctx.step("flaky", flaky, retry=again)
        ctx.step("broken", broken)


def test_every_transition_is_in_the_history_with_who_when_attempt_error_and_duration(
    app: perdure.App,
) -> None:
    define(app, {})
    run = app.start("timeline", 1, key="timeline:1")
    drain(app, worker_id=WORKER)
    assert run.status() == perdure.RunStatus.FAILED
    events = app.history(run.id)
    names = [e.event for e in events]
    assert names[0] == "run_created" and names[-1] == "run_failed"
    for expected in ("run_claimed", "step_retry_scheduled", "step_completed", "step_failed"):
        assert expected in names, names
    # Oldest first, in both id and time.
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    # Who and which attempt: every entry a worker wrote names it.
    for event in events[1:]:
        if event.event != "run_created":
            assert event.worker_id == WORKER, event
    retry = next(e for e in events if e.event == "step_retry_scheduled")
    assert (retry.step_name, retry.step_position, retry.attempt) == ("flaky", 0, 1)
    assert retry.detail is not None and "flaky the first time" in retry.detail["traceback"]
    completed = next(e for e in events if e.event == "step_completed")
    assert (completed.step_name, completed.attempt) == ("flaky", 2)
    failed = next(e for e in events if e.event == "step_failed")
    assert failed.detail is not None and failed.detail["type"].endswith("PermanentError")
    assert "broken for good" in failed.detail["traceback"]
    # Durations: of each step attempt, and of the run from start to end.
    for event in (retry, completed, failed, events[-1]):
        assert event.duration is not None and 0 <= event.duration < 60, event
    steps = {s.name: s for s in app.steps(run.id)}
    assert completed.duration is not None and steps["flaky"].duration is not None
    assert abs(completed.duration - steps["flaky"].duration) < 0.001
    final = app.get_run(run.id)
    assert final.started_at is not None and final.completed_at is not None
    took = (final.completed_at - final.started_at).total_seconds()
    assert events[-1].duration is not None and abs(events[-1].duration - took) < 0.001


def test_cancelling_and_signals_are_in_the_history_too(app: perdure.App) -> None:
    @app.workflow("waits")
    async def waits(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("go", timeout=3600)

    run = app.start("waits")
    app.signal(run.id, "go", {"n": 1}, key="sig-1")
    app.cancel(run.id, reason="changed my mind")
    events = app.history(run.id)
    assert [e.event for e in events] == ["run_created", "signal_received", "run_cancelled"]
    assert events[1].detail is not None and events[1].detail["key"] == "sig-1"
    assert events[2].detail == {"reason": "changed my mind"}


def test_runs_show_history_prints_the_timeline_with_tracebacks(
    pg_url: str, schema: str, make_app: Callable[..., perdure.App]
) -> None:
    app = make_app()
    define(app, {})
    run = app.start("timeline", 1, key="timeline:cli")
    drain(app, worker_id=WORKER)

    def show(*args: str) -> str:
        result = CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, "runs", "show", *args]
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    plain = show("timeline:cli")
    assert "step_retry_scheduled" not in plain and "run_claimed" not in plain
    text = show("timeline:cli", "--history")
    for expected in (
        "run_created",
        "run_claimed",
        "step_retry_scheduled",
        "step_completed",
        "step_failed",
        "run_failed",
        "took",
        WORKER,
        "RuntimeError: flaky the first time",
        "Traceback (most recent call last)",
        "flaky (attempt 1)",
    ):
        assert expected in text, expected
    # The timeline is in order.
    assert (
        text.index("run_created") < text.index("step_retry_scheduled") < text.index("step_failed")
    )
    document = json.loads(show(run.id, "--history", "--json"))
    history = document["history"]
    assert [e["event"] for e in history] == [e.event for e in app.history(run.id)]
    assert all("duration" in e for e in history)
    assert history[-1]["duration"] is not None


def test_history_rows_land_in_day_partitions(app: perdure.App, pg_url: str, schema: str) -> None:
    define(app, {})
    run = app.start("timeline", 1)
    drain(app)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            f"SELECT DISTINCT tableoid::regclass::text FROM {schema}.history WHERE run_id = %s",
            (run.id,),
        ).fetchall()
    # Written at the server's time, so into today's partition, not the default one.
    assert len(rows) == 1 and rows[0][0].startswith(f"{schema}.history_p"), rows
