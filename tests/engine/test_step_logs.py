"""A step's log records: captured per attempt while it runs, bounded, kept with the run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import perdure
from perdure.engine import steplogs
from perdure.testing import drain

log = logging.getLogger("shop.steps")


@pytest.fixture(autouse=True)
def info_level() -> Iterator[None]:
    """Let INFO records of the steps' logger through (the application's logging choice)."""
    before = log.level
    log.setLevel(logging.INFO)
    yield
    log.setLevel(before)


def messages(entry: dict[str, Any]) -> list[str]:
    """The messages of one attempt's records."""
    return [r["message"] for r in entry["records"]]


def test_a_steps_records_are_kept_per_attempt_and_a_failed_attempts_stay(
    app: perdure.App,
) -> None:
    tries = {"n": 0}

    def charge(order: int) -> str:
        tries["n"] += 1
        log.info("charging order %s, try %s", order, tries["n"])
        if tries["n"] == 1:
            log.warning("the gateway is slow")
            raise RuntimeError("gateway timeout")
        return "ok"

    async def pack(order: int) -> str:
        log.info("packing %s", order)
        await asyncio.sleep(0)
        return "packed"

    @app.workflow("shop")
    async def shop(ctx: perdure.Context, order: int) -> str:
        await ctx.step("quiet", lambda: 1)
        await ctx.step(
            "charge", charge, order, retry=perdure.RetryPolicy(max_attempts=2, initial_delay=0)
        )
        return await ctx.step("pack", pack, order)

    run = app.start("shop", 7)
    drain(app)
    assert run.result(timeout=5) == "packed"
    logs = app.step_logs(run.id)
    # The step that logged nothing has no entry; the failed attempt keeps its records.
    assert [(e["name"], e["attempt"], e["status"]) for e in logs] == [
        ("charge", 1, "retrying"),
        ("charge", 2, "completed"),
        ("pack", 1, "completed"),
    ]
    assert messages(logs[0]) == ["charging order 7, try 1", "the gateway is slow"]
    assert [r["level"] for r in logs[0]["records"]] == ["INFO", "WARNING"]
    assert logs[0]["records"][0]["logger"] == "shop.steps"
    assert messages(logs[1]) == ["charging order 7, try 2"]
    assert messages(logs[2]) == ["packing 7"]  # an async step's records too
    assert [e["attempt"] for e in app.step_logs(run.id, step="charge")] == [1, 2]


def test_a_step_that_fails_for_good_keeps_its_records(app: perdure.App) -> None:
    def doomed() -> None:
        log.info("about to fail")
        raise ValueError("no")

    @app.workflow("doomed")
    async def flow(ctx: perdure.Context, _: Any) -> None:
        await ctx.step("doomed", doomed, retry=perdure.RetryPolicy(max_attempts=1))

    run = app.start("doomed", None)
    drain(app)
    assert run.status() == "failed"
    (entry,) = app.step_logs(run.id)
    assert (entry["status"], messages(entry)) == ("failed", ["about to fail"])


def test_records_of_other_runs_and_of_the_worker_are_not_a_steps(app: perdure.App) -> None:
    log.info("outside any step")

    def one(tag: str) -> str:
        log.info("step of %s", tag)
        return tag

    @app.workflow("pair")
    async def pair(ctx: perdure.Context, tag: str) -> str:
        return await ctx.step("one", one, tag)

    runs = [app.start("pair", tag) for tag in ("a", "b", "c")]
    drain(app, concurrency=3)
    for run, tag in zip(runs, "abc", strict=True):
        (entry,) = app.step_logs(run.id)
        assert messages(entry) == [f"step of {tag}"]


def test_the_records_of_an_attempt_are_bounded_and_marked_truncated(app: perdure.App) -> None:
    def chatty() -> int:
        for i in range(steplogs.MAX_RECORDS + 50):
            log.info("line %s", i)
        return 1

    def wordy() -> int:
        for _ in range(10):
            log.info("x" * 10_000)
        return 1

    @app.workflow("loud")
    async def loud(ctx: perdure.Context, _: Any) -> None:
        await ctx.step("chatty", chatty)
        await ctx.step("wordy", wordy)

    run = app.start("loud", None)
    drain(app)
    chatty_logs, wordy_logs = app.step_logs(run.id)
    assert len(chatty_logs["records"]) == steplogs.MAX_RECORDS and chatty_logs["truncated"]
    assert messages(chatty_logs)[-1] == f"line {steplogs.MAX_RECORDS - 1}"
    assert len(wordy_logs["records"]) == 6 and wordy_logs["truncated"]
    assert sum(len(m) for m in messages(wordy_logs)) <= steplogs.MAX_BYTES


def test_pruning_a_run_deletes_its_step_logs(
    app: perdure.App, db: psycopg.Connection[Any], schema: str
) -> None:
    def noisy() -> int:
        log.info("noise")
        return 1

    @app.workflow("noisy")
    async def flow(ctx: perdure.Context, _: Any) -> None:
        await ctx.step("noisy", noisy)

    run = app.start("noisy", None)
    drain(app)
    assert len(app.step_logs(run.id)) == 1

    def count() -> int:
        return db.execute(f"SELECT count(*) FROM {schema}.step_logs").fetchone()[0]  # type: ignore[index]

    assert count() == 1
    assert app.prune(datetime.now(UTC)).runs == 1
    assert count() == 0


def test_a_warning_logging_has_no_other_handler_for_still_reaches_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steplogs.install()
    lonely = logging.getLogger("lonely.steps")
    lonely.propagate = False  # reaches no handler of its own: logging's last resort
    lonely.addHandler(steplogs._handler)  # type: ignore[arg-type]
    try:
        lonely.warning("disk almost full")
        lonely.info("not shown: below the last resort's level")
    finally:
        lonely.removeHandler(steplogs._handler)  # type: ignore[arg-type]
        lonely.propagate = True
    err = capsys.readouterr().err
    assert "disk almost full" in err and "not shown" not in err
