"""The run page lists a run's updates (status, payload, reply, where applied) and their
history events; a role that sees no payloads sees none of theirs."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard.data import DashboardData

LOCAL = "http://127.0.0.1"


def test_the_run_page_shows_the_updates_of_a_run(app: perdure.App) -> None:
    @app.workflow("desk")
    async def desk(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("close")

    @app.update_handler("desk")
    async def ask(ctx: perdure.Context, question: str) -> str:
        return f"answer-to-{question}"

    @ask.validator
    def _known(question: Any) -> None:
        if question == "forbidden-question":
            raise ValueError("not asked here")

    with BackgroundWorker(app, concurrency=2):
        run = app.start("desk")
        wait_until(lambda: run.status() == "waiting", what="the wait")
        assert app.update(run.id, "ask", "q1", update_id="first-ask") == "answer-to-q1"
        try:
            app.update(run.id, "ask", "forbidden-question", update_id="second-ask")
        except perdure.UpdateRejected:
            pass
    with TestClient(create_app(app, DashboardConfig()), base_url=LOCAL) as client:
        page = client.get(f"/runs/{run.id}").text
    table = page[page.index('<table class="table updates">') :]
    table = table[: table.index("</table>")]
    assert "first-ask" in table and "answer-to-q1" in table and "at step 0, #1" in table
    assert "second-ask" in table and "rejected" in table and "not asked here" in table
    assert "update_accepted" in page and "update_completed" in page
    hidden = DashboardData(app).run_view(run.id).without_payloads().updates
    assert [u["update_id"] for u in hidden] == ["first-ask", "second-ask"]
    assert "answer-to-q1" not in str(hidden) and "q1" not in str([u["payload"] for u in hidden])
