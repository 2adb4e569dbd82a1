"""Updates on the run page's timeline, in a real browser: the marks are drawn where
the update was accepted and replied, inside the lane, with the update's id in
their title, and the page's policy lets the drawing through (no console error).

Playwright drives Debian's Chromium (see test_browser.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

import perdure
from dashboard.test_browser import ARGS, CHROMIUM, WAIT_MS, shot
from dashboard.test_updates_page import asked
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer


@pytest.fixture
def served(app: perdure.App) -> Iterator[tuple[str, str]]:
    """The dashboard on a free port, and the id of a run that took two updates."""
    run = asked(app)
    server = BackgroundServer(app, DashboardConfig(port=0, refresh_seconds=0))
    server.wait_started()
    yield server.url.rstrip("/"), run.id
    server.stop()


@pytest.fixture
def page(served: tuple[str, str]) -> Iterator[Page]:
    """A page of headless Chromium that fails the test on script or console errors."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (as .ci/run does)")
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS
        )
        opened = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        opened.on("pageerror", lambda exc: errors.append(str(exc)))

        def console(message: ConsoleMessage) -> None:
            if message.type == "error":
                errors.append(message.text)

        opened.on("console", console)
        yield opened
        browser.close()
        assert errors == []


def test_update_marks_are_drawn_inside_their_lane_in_time_order(
    page: Page, served: tuple[str, str]
) -> None:
    base, run_id = served
    page.goto(f"{base}/runs/{run_id}")
    lane = page.locator('.lane[data-update="first-ask"]')
    expect(lane.locator(".lane-label")).to_have_text("ask", timeout=WAIT_MS)
    track = lane.locator("svg.track").bounding_box()
    accepted = lane.locator('circle[data-mark="accepted"]')
    replied = lane.locator('circle[data-mark="replied"]')
    expect(accepted).to_be_visible()
    expect(replied).to_be_visible()
    a, r = accepted.bounding_box(), replied.bounding_box()
    assert track and a and r
    assert track["x"] - a["width"] <= a["x"] <= r["x"] <= track["x"] + track["width"]
    assert a["width"] >= 8 and a["height"] >= 8  # a visible mark, not a dot
    # Filled in the status's colour (completed: green), the refused one hollow.
    fill = accepted.evaluate("node => getComputedStyle(node).fill")
    assert fill not in ("none", "rgb(0, 0, 0)", "rgb(255, 255, 255)")
    refused = page.locator('.lane[data-update="second-ask"] circle[data-mark="rejected"]')
    expect(refused).to_be_visible()
    assert refused.evaluate("node => getComputedStyle(node).fill") == "rgb(255, 255, 255)"
    assert "id first-ask" in (accepted.locator("title").text_content() or "")
    expect(page.locator(".legend")).to_contain_text("update: accepted, replied")
    shot(page, "run-with-updates")
