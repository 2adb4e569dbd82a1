"""Make the screenshots of docs/dashboard.md's run pages: the start form, an
attempt a crash ended, a step's logs.

    python docs/images/screenshots_runs.py     # PERDURE_DATABASE_URL, else the embedded PostgreSQL

A real ``perdure worker`` process runs this file's workflow and is SIGKILLed
while a step runs; a second worker finishes the run. The dashboard is then
served on a free port and Playwright drives Debian's Chromium
(/usr/bin/chromium) to take the pictures. Not run by the tests.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import sync_playwright

import perdure
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer

HERE = Path(__file__).resolve().parent
SCHEMA = "perdure_screens_runs"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
MARK = Path(f"/tmp/perdure-screens-{os.getpid()}.charging")

log = logging.getLogger("shop.fulfil")
log.setLevel(logging.INFO)
app = perdure.App(schema=SCHEMA)


def reserve(order: dict[str, Any]) -> str:
    log.info("reserving %d items for order %s", len(order["items"]), order["id"])
    return f"hold-{order['id']}"


def charge(order: dict[str, Any]) -> str:
    log.info("charging %.2f EUR to card ending %s", order["total"], order["card"][-4:])
    mark = os.environ.get("SCREENS_MARK")
    if mark and not Path(mark).exists():
        Path(mark).write_text(str(os.getpid()))  # the first try: the crash lands here
    time.sleep(3)
    log.info("gateway answered: approved (auth code A-%s)", order["id"])
    return f"ch_{order['id']}"


def ship(order: dict[str, Any]) -> str:
    log.info("label printed for %s", order["city"])
    log.warning("carrier pickup moved to tomorrow 09:00")
    return f"track-{order['id']}"


@app.workflow("fulfil")
async def fulfil(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, str]:
    """Reserve, charge, ship: each step logs what it does."""
    hold = await ctx.step("reserve", reserve, order)
    paid = await ctx.step("charge", charge, order)
    tracking = await ctx.step("ship", ship, order)
    return {"hold": hold, "charge": paid, "tracking": tracking}


def worker(url: str) -> subprocess.Popen[bytes]:
    """A ``perdure worker`` process serving this file's workflow, with a short lease."""
    env = dict(os.environ)
    env.update(
        PERDURE_DATABASE_URL=url,
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        SCREENS_MARK=str(MARK),
    )
    command = [sys.executable, "-m", "perdure", "worker", "screenshots_runs:app"]
    options = ["--lease-seconds", "2", "--poll-seconds", "0.2", "--log-level", "info"]
    return subprocess.Popen([*command, *options], env=env, stdout=subprocess.DEVNULL)


def wait(predicate: Any, seconds: float, what: str) -> None:
    """Poll ``predicate`` until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)


def crashed_run(url: str) -> str:
    """A run whose charge step's first attempt a SIGKILL ended; its id."""
    MARK.unlink(missing_ok=True)
    victim = worker(url)
    wait(lambda: any(w.name == "fulfil" for w in app.workflows()), 30, "the worker")
    order = {"id": 4711, "items": ["tea", "mug"], "total": 23.5, "card": "4242424242424242",
             "city": "Lyon"}  # fmt: skip
    run = app.start("fulfil", order, key="order-4711")
    wait(MARK.exists, 30, "the charge step to start")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    rescuer = worker(url)
    run.result(timeout=60)
    rescuer.terminate()
    rescuer.wait(30)
    MARK.unlink(missing_ok=True)
    return run.id


def shoot(base: str, run_id: str) -> None:
    """The three pictures."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        page.goto(f"{base}/workflows")
        card = page.locator("#wf-fulfil-1")
        card.get_by_text("Start run…").click()
        card.locator('textarea[name="input"]').fill(
            '{\n  "id": 4712,\n  "items": ["tea"],\n  "total": 9.5,\n'
            '  "card": "4000056655665556",\n  "city": "Nantes"\n}'
        )
        card.locator('input[name="key"]').fill("order-4712")
        card.screenshot(path=str(HERE / "dashboard-start-run.png"))
        page.goto(f"{base}/runs/{run_id}")
        timeline = page.locator("section.card", has=page.locator(".gantt"))
        timeline.screenshot(path=str(HERE / "dashboard-crashed-attempt.png"))
        for details in page.locator("tr.step-logs details").all():
            details.evaluate("node => node.open = true")
        page.locator("section.card", has=page.locator("table.steps")).screenshot(
            path=str(HERE / "dashboard-step-logs.png")
        )
        browser.close()


def main() -> None:
    """Make the screenshots on this App's database, in a schema of their own."""
    url = app.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.register()
    run_id = crashed_run(url)
    server = BackgroundServer(app, DashboardConfig(port=0, refresh_seconds=0))
    server.wait_started()
    try:
        shoot(server.url.rstrip("/"), run_id)
    finally:
        server.stop()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.close()
    print(f"screenshots written to {HERE}")


if __name__ == "__main__":
    main()
