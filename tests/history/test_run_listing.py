"""Listing runs: every filter, newest first, and cursor pages that neither repeat nor skip."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli
from perdure.testing import drain

START = datetime(2026, 3, 1, 12, tzinfo=UTC)


def define(app: perdure.App) -> None:
    """Three workflows on two queues and two versions; gamma always fails."""

    @app.workflow("alpha", queue="q1")
    def alpha(ctx: perdure.SyncContext, x: int) -> int:
        return int(ctx.step("double", lambda: x * 2))

    @app.workflow("beta", version=2, queue="q2")
    def beta(ctx: perdure.SyncContext, x: int) -> int:
        return x

    @app.workflow("gamma")
    def gamma(ctx: perdure.SyncContext, x: int) -> int:
        raise perdure.PermanentError("refused")


def ids(runs: list[perdure.Run]) -> list[str]:
    return [run.id for run in runs]


def test_each_filter_selects_its_runs_newest_first(
    make_app: Callable[..., perdure.App],
) -> None:
    clock = perdure.VirtualClock(START)
    app = make_app(clock=clock)
    define(app)

    def start(workflow: str, key: str) -> str:
        clock.advance(seconds=1)
        return app.start(workflow, 1, key=key).id

    alphas = [start("alpha", f"order:{i}") for i in range(3)]
    clock.advance(hours=1)
    betas = [start("beta", f"invoice:{i}") for i in range(2)]
    failed = start("gamma", "order:99")
    drain(app, worker_id="worker-one")
    clock.advance(hours=1)
    queued = start("alpha", "order:late")

    newest_first = [queued, failed, *reversed(betas), *reversed(alphas)]
    assert ids(app.list_runs()) == newest_first
    assert ids(app.list_runs(workflow="alpha")) == [queued, *reversed(alphas)]
    assert ids(app.list_runs(status="failed")) == [failed]
    assert ids(app.list_runs(status=perdure.RunStatus.QUEUED)) == [queued]
    assert ids(app.list_runs(version=2)) == list(reversed(betas))
    assert ids(app.list_runs(queue="q2")) == list(reversed(betas))
    assert ids(app.list_runs(worker="worker-one")) == newest_first[1:]
    assert ids(app.list_runs(worker="nobody")) == []
    assert ids(app.list_runs(key_prefix="invoice:")) == list(reversed(betas))
    assert ids(app.list_runs(key_prefix="order:")) == [queued, failed, *reversed(alphas)]
    one_hour = START + timedelta(hours=1)
    assert ids(app.list_runs(since=one_hour)) == [queued, failed, *reversed(betas)]
    assert ids(app.list_runs(before=one_hour)) == list(reversed(alphas))
    assert ids(app.list_runs(since=one_hour, before=one_hour + timedelta(minutes=30))) == [
        failed,
        *reversed(betas),
    ]
    assert ids(app.list_runs(workflow="alpha", status="completed")) == list(reversed(alphas))
    assert ids(app.list_runs(workflow="alpha", worker="worker-one", limit=2)) == [
        alphas[2],
        alphas[1],
    ]
    assert all(run.worker_id == "worker-one" for run in app.list_runs(worker="worker-one"))


def test_pages_never_repeat_or_skip_a_run_while_new_runs_arrive(app: perdure.App) -> None:
    define(app)
    before = [app.start("alpha", i).id for i in range(23)]
    seen: list[str] = []
    cursor = None
    arrived: list[str] = []
    while True:
        page = app.list_runs(cursor=cursor, limit=4)
        seen += ids(page)
        # Runs keep arriving between pages: they are newer than the first page.
        arrived += [app.start("alpha", 100 + i).id for i in range(3)]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(before))
    assert len(seen) == len(set(seen))
    # The next first page starts with the newcomers, newest first.
    assert ids(app.list_runs(limit=3)) == list(reversed(arrived))[:3]


def test_pages_of_a_filtered_listing_cover_exactly_its_runs(
    make_app: Callable[..., perdure.App],
) -> None:
    clock = perdure.VirtualClock(START)
    app = make_app(clock=clock)
    define(app)
    wanted = []
    for i in range(10):
        # Several runs share a created_at: the id breaks the tie, in both orders.
        if i % 3 == 0:
            clock.advance(seconds=1)
        wanted.append(app.start("beta", i).id)
        app.start("alpha", i)
    pages = []
    page = app.list_runs(workflow="beta", limit=3)
    pages.append(ids(page))
    while page.next_cursor is not None:
        page = app.list_runs(workflow="beta", limit=3, cursor=page.next_cursor)
        pages.append(ids(page))
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    flat = [run_id for p in pages for run_id in p]
    assert sorted(flat) == sorted(wanted) and len(set(flat)) == 10
    newest = app.list_runs(workflow="beta", limit=10)
    assert flat == ids(newest) and newest.next_cursor is None
    # Only given runs (RunFilter.runs, as bulk operations take it), paged alike.
    chosen = [run_id for run_id in flat if run_id in wanted[:3]]
    some = app.list_runs(runs=wanted[:3], limit=2)
    assert ids(some) == chosen[:2] and some.next_cursor is not None
    rest = app.list_runs(runs=wanted[:3], limit=2, cursor=some.next_cursor)
    assert ids(rest) == chosen[2:] and rest.next_cursor is None


def test_listing_from_async_code(app: perdure.App) -> None:
    define(app)
    first = app.start("alpha", 1).id
    second = app.start("beta", 1).id

    async def main() -> tuple[list[str], str | None]:
        page = await app.list_runs_async(limit=1)
        rest = await app.list_runs_async(limit=1, cursor=page.next_cursor, queue="q1")
        return ids(page) + ids(rest), rest.next_cursor

    assert asyncio.run(main()) == ([second, first], None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"version": 0}, "version must be an integer"),
        ({"queue": ""}, "queue must be a non-empty string"),
        ({"key_prefix": 7}, "key_prefix must be a non-empty string"),
        ({"worker": "x" * 201}, "worker must be a non-empty string"),
        ({"cursor": "not-a-cursor"}, "not a cursor from a previous page"),
        ({"archived": "yes"}, "archived must be True or False"),
        ({"limit": 0}, "limit must be an integer"),
    ],
)
def test_bad_listing_options_are_refused(
    app: perdure.App, options: dict[str, object], message: str
) -> None:
    with pytest.raises(perdure.ConfigurationError, match=message):
        app.list_runs(**options)  # type: ignore[arg-type]


def test_the_cli_pages_with_the_cursor_it_prints(
    pg_url: str, schema: str, make_app: Callable[..., perdure.App]
) -> None:
    app = make_app()
    define(app)
    started = [app.start("alpha", i, key=f"cli:{i}").id for i in range(5)]
    app.start("beta", 1, key="other:1")

    def invoke(*args: str) -> Result:
        result = CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, "runs", "list", *args]
        )
        assert result.exit_code == 0, result.output
        return result

    first = invoke("--key-prefix", "cli:", "--limit", "3", "--json")
    page = json.loads(first.stdout)
    assert [r["id"] for r in page["runs"]] == started[:1:-1]
    # With --json the cursor is in the document, and stderr stays empty.
    assert page["next_cursor"] and first.stderr == ""
    second = invoke(
        "--key-prefix", "cli:", "--limit", "3", "--cursor", page["next_cursor"], "--json"
    )
    last = json.loads(second.stdout)
    assert [r["id"] for r in last["runs"]] == started[1::-1]
    assert last["next_cursor"] is None and second.stderr == ""
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    table = invoke("--queue", "q1", "--version", "1", "--until", soon, "--limit", "2")
    assert "next page: --cursor" in table.stderr
    assert started[4] in table.stdout and started[2] not in table.stdout
    assert "no runs match" in invoke("--worker", "nobody").stdout
