"""The run page of a run in a continue-as-new chain lists the chain, oldest first,
with the run shown marked; a long chain is cut with a link to go further."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import perdure
from perdure import testing
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard import data as dashboard_data

LOCAL = "http://127.0.0.1"


def counted(app: perdure.App) -> list[str]:
    """The ids of a chain of four runs of 'counter', first to last, and a lone run's."""

    @app.workflow("counter")
    async def counter(ctx: perdure.Context, n: int) -> int:
        n = await ctx.step("inc", lambda: n + 1)
        if n < 4:
            await ctx.continue_as_new(n)
        return n

    first = app.start("counter", 0, key="counter-1")
    testing.drain(app)
    assert first.result(timeout=30) == 4
    ids = [first.id]
    while (found := app.get_run(ids[-1])).continued_to is not None:
        ids.append(found.continued_to)
    assert len(ids) == 4
    return ids


def rows(page: str) -> list[tuple[str, str]]:
    """The chain table's rows: (run id, first cell)."""
    table = page[page.index('<table class="table chain">') :]
    table = table[: table.index("</table>")]
    return re.findall(r'data-chain="([^"]+)"><td class="num dim">([^<]*)</td>', table)


def test_the_run_page_lists_the_chain_around_the_run(app: perdure.App) -> None:
    ids = counted(app)
    lone = app.start("counter", 10)
    testing.drain(app)
    with TestClient(create_app(app, DashboardConfig()), base_url=LOCAL) as client:
        second = client.get(f"/runs/{ids[1]}").text
        last = client.get(f"/runs/{ids[-1]}").text
        alone = client.get(f"/runs/{lone.id}").text
    assert rows(second) == [(ids[0], "-1"), (ids[1], "this run"), (ids[2], "+1"), (ids[3], "+2")]
    assert f'class="this-run" aria-current="page" data-chain="{ids[1]}"' in second
    assert second.count("badge tone-ok") >= 4  # continued, continued, continued, completed
    assert [i for i, _ in rows(last)] == ids and rows(last)[-1][1] == "this run"
    assert "earlier runs" not in second and "later runs" not in second
    assert '<table class="table chain">' not in alone


def test_a_long_chain_is_cut_with_links_to_go_further(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = counted(app)
    monkeypatch.setattr(dashboard_data, "CHAIN_REACH", 1)
    with TestClient(create_app(app, DashboardConfig()), base_url=LOCAL) as client:
        page = client.get(f"/runs/{ids[1]}").text
        first = client.get(f"/runs/{ids[0]}").text
        last = client.get(f"/runs/{ids[-1]}").text
    assert [i for i, _ in rows(page)] == ids[0:3]
    assert "earlier runs" not in page  # the first run of the chain is shown
    assert "later runs: follow “continued to”" in page
    assert [i for i, _ in rows(first)] == ids[0:2]
    assert "earlier runs" not in first and "later runs" in first
    assert [i for i, _ in rows(last)] == ids[2:4]
    assert "earlier runs: follow “continued from”" in last and "later runs" not in last
