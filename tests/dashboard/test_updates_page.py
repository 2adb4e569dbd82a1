"""The run page lists a run's updates (status, payload, reply, where applied) and their
history events, and marks each on the timeline where it was accepted and replied;
a role that sees no payloads sees none of theirs, in the list or in the marks."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard.data import DashboardData
from perdure.dashboard.roles import NamedToken

LOCAL = "http://127.0.0.1"
BLIND = "nora-no-payloads-token-42"


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


def asked(app: perdure.App) -> perdure.RunHandle:
    """A waiting run of 'desk' that answered update 'first-ask' ("q1") and refused
    'second-ask' (its validator's message quotes the request)."""

    @app.workflow("desk")
    async def desk(ctx: perdure.Context) -> None:
        await ctx.wait_for_signal("close")

    @app.update_handler("desk")
    async def ask(ctx: perdure.Context, question: str) -> str:
        return f"answer-to-{question}"

    @ask.validator
    def _known(question: Any) -> None:
        if question.startswith("secret"):
            raise ValueError(f"not asked here: {question}")

    with BackgroundWorker(app, concurrency=2):
        run = app.start("desk")
        wait_until(lambda: run.status() == "waiting", what="the wait")
        assert app.update(run.id, "ask", "q1", update_id="first-ask") == "answer-to-q1"
        try:
            app.update(run.id, "ask", "secret-question", update_id="second-ask")
        except perdure.UpdateRejected:
            pass
    return run


def lane_of(page: str, update_id: str) -> str:
    """The HTML of the timeline lane of update ``update_id``."""
    start = page.index(f'data-update="{update_id}"')
    return page[start : page.index("</svg>", start)]


def marks(lane: str) -> dict[str, tuple[float, str, str]]:
    """Each mark of a lane by kind: its position (percent), classes and title."""
    found = re.findall(
        r'<circle cx="([0-9.]+)%"[^>]*class="([^"]+)" data-mark="(\w+)"><title>([^<]*)</title>',
        lane,
    )
    return {kind: (float(x), classes, title) for x, classes, kind, title in found}


def test_the_timeline_marks_each_update_where_it_was_accepted_and_replied(
    app: perdure.App,
) -> None:
    run = asked(app)
    with TestClient(create_app(app, DashboardConfig()), base_url=LOCAL) as client:
        page = client.get(f"/runs/{run.id}").text
    gantt = page[page.index('<div class="gantt">') : page.index("</section>", page.index("gantt"))]
    answered = marks(lane_of(gantt, "first-ask"))
    assert set(answered) == {"accepted", "replied"}
    accepted, replied = answered["accepted"], answered["replied"]
    assert 0 <= accepted[0] <= replied[0] <= 100
    assert "tone-ok" in accepted[1] and "tone-ok" in replied[1]
    title = accepted[2]
    assert "update ask · id first-ask · completed at step 0, #1" in title
    assert "payload &#34;q1&#34;" in title and "reply &#34;answer-to-q1&#34;" in title
    assert 'data-lane="ask"' in gantt and "update · completed" in gantt
    refused = marks(lane_of(gantt, "second-ask"))
    assert set(refused) == {"rejected"}
    assert "tone-warn" in refused["rejected"][1]
    assert "id second-ask · rejected · refused +" in refused["rejected"][2]
    assert "ValueError: not asked here: secret-question" in refused["rejected"][2]
    # The run's lane comes first, then one lane per update, in the order they were sent.
    assert gantt.index('data-lane="run"') < gantt.index("first-ask") < gantt.index("second-ask")


def test_a_role_without_payloads_sees_the_marks_without_payloads(app: perdure.App) -> None:
    run = asked(app)
    config = DashboardConfig(tokens=(NamedToken.of("nora", "viewer-no-payloads", BLIND),))
    with TestClient(create_app(app, config), base_url=LOCAL) as client:
        response = client.get(f"/runs/{run.id}", headers={"authorization": f"Bearer {BLIND}"})
    assert response.status_code == 200
    page = response.text
    answered = marks(lane_of(page, "first-ask"))
    assert set(answered) == {"accepted", "replied"}
    assert "id first-ask · completed" in answered["accepted"][2]
    refused = marks(lane_of(page, "second-ask"))["rejected"][2]
    assert "id second-ask · rejected" in refused and refused.endswith("· UpdateRejected")
    # Neither the payloads, the reply nor the refusal's message (it quotes the
    # request) is anywhere on the page: not in the marks, not in the list.
    for secret in ("q1", "answer-to-q1", "secret-question", "not asked here"):
        assert secret not in page
