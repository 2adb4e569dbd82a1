"""The dashboard's banner of runs no live worker serves, and its move action: operators only."""

from __future__ import annotations

from collections.abc import Callable

from starlette.testclient import TestClient

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.dashboard import DashboardConfig, create_app
from perdure.dashboard.roles import NamedToken
from stranded.test_stranded import OPTIONS, stepped

LOCAL = "http://127.0.0.1"
TOKENS = {
    "vera": ("viewer", "vera-token-0123456789"),
    "otto": ("operator", "otto-token-0123456789"),
}
BANNER = "2 runs of stepped@1 wait for a worker that serves version 1; live workers serve version 2"


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name][1]}"}


def test_the_banner_shows_stranded_runs_and_only_an_operator_moves_them(
    make_app: Callable[..., perdure.App],
) -> None:
    one = make_app()
    stepped(one, 1)
    waiting = [one.start("stepped", region) for region in ("eu", "us")]
    two = make_app()
    stepped(two, 2)
    tokens = tuple(NamedToken.of(n, role, token) for n, (role, token) in TOKENS.items())
    with (
        BackgroundWorker(two, **OPTIONS),
        TestClient(create_app(two, DashboardConfig(tokens=tokens)), base_url=LOCAL) as web,
    ):
        wait_until(lambda: two.stranded() and two.stranded()[0].served == [2], what="v2 live")
        for path in ("/runs", "/workflows", "/runs?workflow=stepped"):
            page = web.get(path, headers=bearer("vera"))
            assert page.status_code == 200
            assert BANNER in page.text, path
            assert "/workflows/stepped/1/move" not in page.text  # a viewer gets no button
        assert BANNER not in web.get("/runs?workflow=other", headers=bearer("vera")).text

        refused = web.post("/workflows/stepped/1/move", data={"to": "2"}, headers=bearer("vera"))
        assert refused.status_code == 403
        assert {two.get_run(h.id).version for h in waiting} == {1}
        entry = two.audit_log(action="move-version")[0]
        assert (entry.actor, entry.outcome, entry.via) == ("vera", "refused", "token")

        shown = web.get("/workflows", headers=bearer("otto"))
        assert 'action="/workflows/stepped/1/move"' in shown.text
        for bad, why in (("x", "must be a number"), ("1", "both 1"), ("9", "version 9")):
            answer = web.post("/workflows/stepped/1/move", data={"to": bad}, headers=bearer("otto"))
            assert answer.status_code == 400
            assert "move refused" in answer.text and why in answer.text
        assert {two.get_run(h.id).version for h in waiting} == {1}

        moved = web.post(
            "/workflows/stepped/1/move",
            data={"to": "2"},
            headers=bearer("otto"),
            follow_redirects=False,
        )
        assert moved.status_code == 303
        assert moved.headers["location"].startswith("/workflows?moved=2&pinned=0&to=2")
        assert sorted(h.result(timeout=60) for h in waiting) == ["v2 eu", "v2 us"]
        after = web.get(moved.headers["location"], headers=bearer("otto"))
        assert "2 run(s) moved to version 2" in after.text
        assert BANNER not in after.text
        entry = two.audit_log(action="move-version")[0]
        assert (entry.actor, entry.outcome) == ("otto", "ok")
        assert sorted(entry.runs) == sorted(h.id for h in waiting)
        timeline = web.get(f"/runs/{waiting[0].id}", headers=bearer("vera"))
        assert timeline.status_code == 200 and "run_version_moved" in timeline.text
