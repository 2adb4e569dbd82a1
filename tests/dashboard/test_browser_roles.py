"""Roles in a real browser: a viewer signs in, sees their name, and no action to take.

Playwright drives Debian's Chromium (see test_browser.py) against a dashboard
served by uvicorn with named tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import perdure
from dashboard.test_browser import ARGS, CHROMIUM, WAIT_MS, off_loop
from perdure.dashboard import DashboardConfig
from perdure.dashboard.roles import NamedToken
from perdure.dashboard.server import BackgroundServer

VIEWER = "vera-browser-token-42"
OPERATOR = "otto-browser-token-42"


@pytest.fixture
def held(app: perdure.App) -> perdure.RunHandle:
    """A queued run of 'hold' (no worker runs it)."""

    @app.workflow("hold")
    async def hold(ctx: perdure.Context, data: Any) -> Any:
        return await ctx.wait_for_signal("go")

    app.register()
    return app.start("hold", 1)


@pytest.fixture
def served(app: perdure.App, held: perdure.RunHandle) -> Iterator[str]:
    """The dashboard with a viewer's and an operator's token, on a free port."""
    tokens = (NamedToken.of("vera", "viewer", VIEWER), NamedToken.of("otto", "operator", OPERATOR))
    server = BackgroundServer(app, DashboardConfig(port=0, refresh_seconds=0, tokens=tokens))
    server.wait_started()
    yield server.url.rstrip("/")
    server.stop()


@pytest.fixture
def page(served: str) -> Iterator[Page]:
    """A fresh page of headless Chromium that fails the test on script errors."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (as .ci/run does)")
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS
        )
        opened = browser.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda exc: errors.append(str(exc)))
        yield opened
        browser.close()
        assert errors == []


def sign_in(page: Page, served: str, token: str, path: str) -> None:
    page.goto(f"{served}{path}")
    page.fill("input[name=token]", token)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{served}{path}", timeout=WAIT_MS)


def test_a_viewer_sees_their_name_and_no_cancel_button(
    page: Page, served: str, held: perdure.RunHandle, app: perdure.App
) -> None:
    sign_in(page, served, VIEWER, f"/runs/{held.id}")
    expect(page.locator("[data-signed-in]")).to_have_text("vera viewer", timeout=WAIT_MS)
    expect(page.locator("h1")).to_contain_text("hold")
    expect(page.get_by_text("Cancel…")).to_have_count(0)
    expect(page.locator("section.actions")).to_have_count(0)
    assert off_loop(lambda: app.get_run(held.id).status.value) == "queued"


def test_an_operator_sees_the_cancel_button(
    page: Page, served: str, held: perdure.RunHandle
) -> None:
    sign_in(page, served, OPERATOR, f"/runs/{held.id}")
    expect(page.locator("[data-signed-in]")).to_have_text("otto operator", timeout=WAIT_MS)
    expect(page.get_by_text("Cancel…")).to_have_count(1)
