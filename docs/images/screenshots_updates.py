"""Make the screenshots of docs/updates.md and docs/versioning.md: a run's updates on
its timeline and in its list, a continue-as-new chain, a stranded version's banner.

    python docs/images/screenshots_updates.py   # PERDURE_DATABASE_URL, else the embedded PostgreSQL

A real ``perdure worker`` process serves ``fleet`` (the cart, the subscription and
version 2 of checkout, not version 1): a cart run takes updates while it waits,
one refused; a subscription continues as new four times; three runs of
checkout@1 wait with no worker for them. The dashboard is then served on a free
port and Playwright drives Debian's Chromium (/usr/bin/chromium) to take the
pictures. Not run by the tests (tests/dashboard check the same pages).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import Page, sync_playwright

import perdure
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer

HERE = Path(__file__).resolve().parent
SCHEMA = "perdure_screens_updates"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def reserve(item: str) -> str:
    time.sleep(0.4)  # the warehouse answers
    return f"hold-{item}"


def charge(items: list[str]) -> str:
    time.sleep(0.3)
    return f"ch_{len(items)}"


def bill(account: str, cycle: int) -> str:
    time.sleep(0.05)
    return f"inv-{account}-{cycle}"


def define(target: perdure.App, versions: tuple[int, ...]) -> None:
    """The workflows of these pictures, with ``versions`` of checkout."""

    @target.workflow("cart")
    async def cart(ctx: perdure.Context, user: str) -> dict[str, Any]:
        ctx.state["items"] = []
        await ctx.wait_for_signal("checkout")
        paid = await ctx.step("charge", charge, ctx.state["items"])
        return {"user": user, "items": ctx.state["items"], "charge": paid}

    @target.update_handler("cart")
    async def add_item(ctx: perdure.Context, item: str) -> int:
        await ctx.step("reserve", reserve, item)
        ctx.state["items"].append(item)
        return len(ctx.state["items"])

    @add_item.validator
    def check_item(item: Any) -> None:
        if not isinstance(item, str) or not item:
            raise ValueError("an item is a non-empty string")

    @target.update_handler("cart")
    async def item_count(ctx: perdure.Context) -> int:
        return len(ctx.state["items"])

    @target.workflow("subscription")
    async def subscription(ctx: perdure.Context, state: dict[str, Any]) -> dict[str, Any]:
        for _ in range(3):  # three billing cycles per run, then a fresh run
            state["cycle"] += 1
            await ctx.step("bill", bill, state["account"], state["cycle"])
            if state["cycle"] >= state["until"]:
                return state
        await ctx.continue_as_new(state)

    bodies = {1: checkout_v1, 2: checkout_v2}
    for version in versions:
        target.workflow("checkout", version=version)(bodies[version])


async def checkout_v1(ctx: perdure.Context, order: int) -> str:
    """Version 1 of the checkout: an answer."""
    return f"order {order} taken"


async def checkout_v2(ctx: perdure.Context, order: int) -> dict[str, Any]:
    """Version 2: the answer with a receipt."""
    return {"order": order, "receipt": f"r-{order}"}


app = perdure.App(schema=SCHEMA)
define(app, (1, 2))
#: What the worker process serves: version 2 of checkout only.
fleet = perdure.App(schema=SCHEMA)
define(fleet, (2,))


def worker(url: str) -> subprocess.Popen[bytes]:
    """A ``perdure worker`` process serving ``fleet``."""
    env = dict(os.environ)
    env.update(
        PERDURE_DATABASE_URL=url,
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
    )
    command = [sys.executable, "-m", "perdure", "worker", "screenshots_updates:fleet"]
    return subprocess.Popen([*command, "--poll-seconds", "0.2"], env=env, stdout=subprocess.DEVNULL)


def wait(predicate: Any, seconds: float, what: str) -> None:
    """Poll ``predicate`` until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)


def shop() -> str:
    """A cart that took three items, refused an empty one, answered a count; its id."""
    run = app.start("cart", "ada", key="cart:ada")
    wait(lambda: run.status() == "waiting", 60, "the cart to wait")
    for n, item in enumerate(("tea", "mug", "", "kettle"), start=1):
        try:
            app.update("cart:ada", "add_item", item, update_id=f"req-{n}", timeout=60)
        except perdure.UpdateRejected:
            pass
        time.sleep(0.3)  # a shopper's pace, so the marks stand apart
    app.update("cart:ada", "item_count", None, update_id="req-5", timeout=60)
    time.sleep(0.3)
    app.signal("cart:ada", "checkout")
    run.result(timeout=60)
    return run.id


def subscribe() -> list[str]:
    """A subscription of ten billing cycles: a chain of four runs; their ids."""
    first = app.start("subscription", {"account": "ada", "cycle": 0, "until": 10}, key="sub:ada")
    first.result(timeout=120)
    ids = [first.id]
    while (found := app.get_run(ids[-1])).continued_to is not None:
        ids.append(found.continued_to)
    return ids


def strand() -> None:
    """Three runs of checkout@1, which no live worker serves."""
    for order in (1041, 1042, 1043):
        app.start("checkout", order, version=1)
    wait(lambda: any(s.served == [2] for s in app.stranded()), 90, "checkout@1 stranded")


def below(page: Page, top: str, bottom: str, path: Path) -> None:
    """A picture of the page from the top of ``top`` to the bottom of ``bottom``."""
    a = page.locator(top).first.bounding_box()
    b = page.locator(bottom).first.bounding_box()
    assert a and b
    y = max(a["y"] - 12, 0)
    clip = {"x": 0, "y": y, "width": 1280, "height": b["y"] + b["height"] + 12 - y}
    page.screenshot(path=str(path), clip=clip, full_page=True)


def shoot(base: str, cart: str, chain: list[str]) -> None:
    """The pictures."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        page.goto(f"{base}/runs/{cart}")
        page.locator("section.card", has=page.locator(".gantt")).screenshot(
            path=str(HERE / "dashboard-update-timeline.png")
        )
        page.locator("section.card", has=page.locator("table.updates")).screenshot(
            path=str(HERE / "dashboard-updates.png")
        )
        page.goto(f"{base}/runs/{chain[2]}")
        page.locator("section.chain").screenshot(path=str(HERE / "dashboard-chain.png"))
        page.goto(f"{base}/workflows")
        below(page, ".page-head", "#wf-checkout-1", HERE / "dashboard-stranded.png")
        browser.close()


def main() -> None:
    """Make the screenshots on this App's database, in a schema of their own."""
    url = app.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.register()
    serving = worker(url)
    try:
        cart = shop()
        chain = subscribe()
        strand()
        server = BackgroundServer(app, DashboardConfig(port=0, refresh_seconds=0))
        server.wait_started()
        try:
            shoot(server.url.rstrip("/"), cart, chain)
        finally:
            server.stop()
    finally:
        serving.terminate()
        serving.wait(30)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.close()
    fleet.close()
    print(f"screenshots written to {HERE}")


if __name__ == "__main__":
    main()
