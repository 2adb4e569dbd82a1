"""The dashboard in a real browser: Playwright driving Debian's Chromium.

A real worker runs the test workflows on a thread while the dashboard is
served by uvicorn on a free port. Screenshots of the main pages are saved
under tests/artifacts/dashboard/ (ignored by git); the path is printed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import perdure
from dashboard.workload import SCRIPT, Flaky, Workload
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer

#: Debian's Chromium (apt-get install chromium; .ci/run installs it).
CHROMIUM = os.environ.get("PERDURE_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"
T = TypeVar("T")
#: Generous: two cores shared by several test runs.
WAIT_MS = 30_000


@pytest.fixture
def browser(served: str) -> Iterator[Browser]:
    """Headless Chromium from Debian's package (no browser download).

    Started after the App, its worker and the dashboard (``served``): Playwright's
    sync API keeps an event loop running on the test's thread, where perdure
    refuses blocking calls; the test's own calls go through ``off_loop``.
    """
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install chromium`, as "
            ".ci/run does) or point PERDURE_TEST_CHROMIUM at a Chromium binary"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def served(defined: perdure.App) -> Iterator[str]:
    """The dashboard of the test App on a free port, refreshing live twice a second."""
    server = BackgroundServer(defined, DashboardConfig(port=0, refresh_seconds=0.5))
    server.wait_started()
    yield server.url.rstrip("/")
    server.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser page that accepts confirmations and fails on script errors."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("dialog", lambda dialog: dialog.accept())
    yield opened
    context.close()
    assert errors == []


def off_loop(call: Callable[[], T]) -> T:
    """Run a blocking perdure call on a thread of its own (see ``browser``)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def shot(page: Page, name: str) -> None:
    """Save a full-page screenshot under the artifacts folder."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def test_runs_page_lists_the_workload_with_counts(
    served: str, workload: Workload, page: Page
) -> None:
    page.goto(f"{served}/runs")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(9)
    counts = page.locator("nav.status-counts")
    expect(counts.locator('[data-status="all"] b')).to_have_text("9")
    expect(counts.locator('[data-status="completed"] b')).to_have_text("6")
    expect(counts.locator('[data-status="failed"] b')).to_have_text("2")
    expect(counts.locator('[data-status="waiting"] b')).to_have_text("1")
    # Newest first: the etl run was started last.
    expect(rows.first).to_have_attribute("data-run", workload.graph)
    shot(page, "runs")

    counts.locator('[data-status="failed"]').click()
    expect(rows).to_have_count(2)
    expect(page.locator('table.runs tbody tr[data-status="failed"]')).to_have_count(2)

    page.goto(f"{served}/runs?key=greet%3A&limit=25")
    expect(rows).to_have_count(4)
    page.goto(f"{served}/runs?workflow=etl")
    expect(rows).to_have_count(1)


def test_failed_run_shows_its_traceback_and_timeline(
    served: str, workload: Workload, page: Page
) -> None:
    page.goto(f"{served}/runs/{workload.failed}")
    expect(page.locator(".run-head .badge")).to_have_text("failed")
    error = page.locator(".error-card")
    expect(error).to_contain_text("boom: the <b>gateway</b> said no")
    expect(error.locator("pre.trace")).to_contain_text("raise ValueError")
    lanes = page.locator(".gantt .lane[data-lane]")
    expect(lanes).to_have_count(3)
    charge = page.locator('.lane[data-lane="charge"]')
    expect(charge.locator('rect[data-kind="failed"]')).to_have_count(2)
    expect(charge.locator('rect[data-kind="backoff"]')).to_have_count(1)
    expect(charge).to_contain_text("2 attempts")
    expect(page.locator('.lane[data-lane="prepare"] rect[data-kind="attempt"]')).to_have_count(1)
    expect(page.locator("table.history")).to_contain_text("step_retry_scheduled")
    shot(page, "run-failed")


def test_retry_from_the_page_and_see_the_run_succeed(
    served: str, workload: Workload, defined: perdure.App, page: Page
) -> None:
    page.goto(f"{served}/runs/{workload.flaky}")
    expect(page.locator(".run-head .badge")).to_have_text("failed")
    Flaky.failing = False
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".flash.ok")).to_contain_text("queued again")
    # Live refresh brings the outcome in without a reload.
    expect(page.locator(".run-head .badge")).to_have_text("completed", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    assert off_loop(lambda: defined.handle(workload.flaky).result(timeout=5)) == "served"


def test_send_a_signal_from_the_page_and_see_the_run_continue(
    served: str, workload: Workload, defined: perdure.App, page: Page
) -> None:
    page.goto(f"{served}/runs/{workload.waiting}")
    expect(page.locator(".run-head .badge")).to_have_text("waiting")
    page.get_by_text("Send signal…").click()
    expect(page.locator('input[name="name"]')).to_have_value("approve")
    page.locator('textarea[name="payload"]').fill('{"approved": true, "by": "ada"}')
    page.locator('input[name="key"]').fill("approval-1")
    wait = page.locator('.lane[data-lane="signal:approve"] rect[data-kind="wait"]')
    expect(wait).to_have_count(1)
    shot(page, "run-signal")
    page.get_by_role("button", name="Send signal", exact=True).click()
    expect(page.locator(".flash.ok")).to_contain_text("Signal sent")
    expect(page.locator(".run-head .badge")).to_have_text("completed", timeout=WAIT_MS)
    expect(page.locator("table.signals")).to_contain_text("approval-1")
    result = off_loop(lambda: defined.handle(workload.waiting).result(timeout=5))
    assert result == {"decision": {"approved": True, "by": "ada"}}


def test_start_a_run_from_its_workflows_page_with_a_json_input(
    served: str, defined: perdure.App, page: Page
) -> None:
    page.goto(f"{served}/workflows")
    card = page.locator("#wf-greet-1")
    card.get_by_text("Start run…").click()
    area = card.locator('textarea[name="input"]')
    area.fill('{"who": ')
    # The browser refuses text that is not JSON before anything is sent.
    expect(card.locator(".json-problem")).to_contain_text("not valid JSON")
    card.get_by_role("button", name="Start run", exact=True).click()
    expect(page).to_have_url(f"{served}/workflows")
    assert off_loop(lambda: defined.list_runs(workflow="greet")) == []
    area.fill('{"who": "ada"}')
    expect(card.locator(".json-problem")).to_be_hidden()
    card.locator('input[name="key"]').fill("greet:ada")
    shot(page, "workflow-start")
    card.get_by_role("button", name="Start run", exact=True).click()
    expect(page.locator(".flash.ok")).to_contain_text("Run started")
    started = off_loop(lambda: defined.get_run("greet:ada"))
    assert (started.workflow, started.input) == ("greet", {"who": "ada"})


def test_a_script_in_an_input_is_shown_as_text_and_never_runs(
    served: str, workload: Workload, page: Page
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    page.goto(f"{served}/runs/{workload.scripted}")
    expect(page.locator("pre.json").first).to_contain_text(SCRIPT)
    expect(page.locator(".key-full")).to_have_text(f"xss:{SCRIPT}")
    assert page.evaluate("window.__pwned") is None
    page.goto(f"{served}/runs")
    expect(page.locator(f'tr[data-run="{workload.scripted}"] .key')).to_have_text(f"xss:{SCRIPT}")
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []


def test_graph_run_draws_its_dag_and_the_main_pages_render(
    served: str, workload: Workload, page: Page
) -> None:
    page.goto(f"{served}/runs/{workload.graph}")
    nodes = page.locator("svg.dag g.node")
    expect(nodes).to_have_count(4)
    expect(page.locator('svg.dag g.node[data-status="completed"]')).to_have_count(4)
    expect(page.locator("svg.dag path.edge")).to_have_count(4)
    shot(page, "run-graph")

    page.goto(f"{served}/")
    expect(page.locator("svg.chart rect.bar").first).to_be_visible()
    expect(page.locator(".totals")).to_contain_text(re.compile(r"9\s+started"))
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    shot(page, "overview")

    page.goto(f"{served}/workflows")
    expect(page.locator("section.workflow")).to_have_count(5)
    shot(page, "workflows")


def test_older_pages_follow_the_cursor_and_the_form_filters_by_tag(
    served: str, defined: perdure.App, page: Page
) -> None:
    # No worker: the runs stay queued, so the counts hold still.
    started = [
        off_loop(lambda i=i: defined.start("greet", i, tags={"batch": "b1" if i % 10 else "b2"}).id)
        for i in range(30)
    ]
    rows = page.locator("table.runs tbody tr")
    live = page.locator("#live")
    page.goto(f"{served}/runs?limit=25")
    expect(rows).to_have_count(25)
    expect(rows.first).to_have_attribute("data-run", started[-1])
    expect(live).not_to_have_attribute("data-refresh", "0")
    # The first page refreshes live: a new run appears on top without a reload.
    newer = off_loop(lambda: defined.start("greet", "late").id)
    expect(rows.first).to_have_attribute("data-run", newer, timeout=WAIT_MS)

    page.get_by_role("link", name="Older →").click()
    expect(page).to_have_url(re.compile(r"[?&]after=[A-Za-z0-9_-]+"))
    expect(live).to_have_attribute("data-refresh", "0")  # an older page holds still
    expect(rows).to_have_count(6)
    # The page after the refreshed one: the six oldest runs, none repeated.
    assert [rows.nth(i).get_attribute("data-run") for i in range(6)] == started[5::-1]
    expect(page.get_by_role("link", name="Older →")).to_have_count(0)
    page.get_by_role("link", name="← Newest").click()
    expect(rows.first).to_have_attribute("data-run", newer)

    page.locator('input[name="tag"]').fill("batch=b2")
    page.get_by_role("button", name="Apply").click()
    expect(rows).to_have_count(3)
    expect(page.locator('nav.status-counts [data-status="all"] b')).to_have_text("3")
    expect(page.locator('input[name="tag"]')).to_have_value("batch=b2")

    page.goto(f"{served}/runs?tag=no-equals-sign&after=not-a-cursor")
    warnings = page.locator(".flash.warn")
    expect(warnings).to_contain_text(["tag must be NAME=VALUE", "page cursor is not valid"])
    expect(rows).to_have_count(31)
