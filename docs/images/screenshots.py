"""Make the dashboard screenshots of the README and docs/dashboard.md.

    python docs/images/screenshots.py            # the embedded PostgreSQL (schema perdure_screens)
    python docs/images/screenshots.py URL        # or a server you name

An hour of traffic is simulated with a VirtualClock (runs started minute by
minute, some failing), then a few runs execute on a real worker so their
timelines have real durations; the dashboard is served on a free port and
Playwright drives Debian's Chromium (/usr/bin/chromium) to take the pictures.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import sync_playwright

import perdure
from perdure.dashboard import DashboardConfig
from perdure.dashboard.server import BackgroundServer
from perdure.testing import drain

HERE = Path(__file__).resolve().parent
SCHEMA = "perdure_screens"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
release = threading.Event()


class Gateway(Exception):
    """The payment gateway said no."""


def define(app: perdure.App, pace: float, clock: perdure.VirtualClock | None = None) -> None:
    """An order checkout, a nightly ETL graph, an approval and a report.

    Steps take time: real time, or virtual time when ``clock`` is given.
    """
    rng = random.Random(7)

    def work(seconds: float) -> None:
        took = seconds * rng.uniform(0.6, 1.4)
        if clock is not None:
            clock.advance(seconds=took)
        else:
            time.sleep(took * pace)

    def charge(order: dict[str, Any]) -> str:
        work(0.12)
        if rng.random() < 0.25:
            raise Gateway("gateway timeout (HTTP 504) after 10 s")
        return f"ch_{order['order_id']}"

    @app.workflow("checkout", version=3)
    async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
        hold = await ctx.step("reserve_inventory", lambda: work(0.05) or f"H-{order['order_id']}")
        paid = await ctx.step(
            "charge_card",
            charge,
            order,
            retry=perdure.RetryPolicy(max_attempts=3, initial_delay=0.2 if pace else 20),
        )
        await ctx.step("send_receipt", lambda: work(0.04))
        return {"hold": hold, "charge": paid}

    @app.workflow("approval")
    async def approval(ctx: perdure.Context, doc: dict[str, Any]) -> str:
        await ctx.step("request_review", lambda: work(0.03))
        decision = await ctx.wait_for_signal("decision")
        return str(decision)

    @app.workflow("report", queue="reports")
    def report(ctx: perdure.SyncContext, what: str) -> str:
        ctx.step("render", lambda: release.wait(600) or "rendered")
        return what

    etl = app.graph("nightly_etl", version=2)

    @etl.step()
    def extract(ctx: perdure.StepContext, day: str) -> list[int]:
        work(0.15)
        return list(range(40))

    @etl.step(depends_on=[extract])
    def clean(ctx: perdure.StepContext, rows: list[int]) -> list[int]:
        work(0.3)
        return [r for r in rows if r % 3]

    @etl.step(depends_on=[extract])
    def enrich(ctx: perdure.StepContext, rows: list[int]) -> int:
        work(0.22)
        return len(rows)

    @etl.step(depends_on=[clean, enrich])
    def load(ctx: perdure.StepContext, parts: dict[str, Any]) -> int:
        work(0.18)
        return len(parts["clean"])

    @etl.step(depends_on=[load], wait_for_signal="publish_ok")
    def publish(ctx: perdure.StepContext, loaded: int) -> str:
        return f"published {loaded} rows"


def simulate_hour(url: str) -> None:
    """Runs started minute by minute over the last hour, on a virtual clock."""
    start = datetime.now(UTC) - timedelta(minutes=59)
    clock = perdure.VirtualClock(start)
    with perdure.App(url, schema=SCHEMA, clock=clock) as app:
        define(app, pace=0, clock=clock)
        app.register()
        order = 1000
        for minute in range(58):
            if clock.wall_now() >= start + timedelta(minutes=minute + 1):
                continue  # the steps' own time already filled this minute
            wave = 6 + 5 * math.sin(minute / 7) + random.Random(minute).randint(0, 4)
            for _ in range(int(wave)):
                order += 1
                order_input = {"order_id": order, "total": order % 97}
                app.start("checkout", order_input, key=f"order:{order}")
            if minute % 15 == 3:
                app.start("nightly_etl", {"day": f"2026-05-{minute:02d}"})
            drain(app)
            rest = start + timedelta(minutes=minute + 1) - clock.wall_now()
            clock.advance(max(rest, timedelta()))


def live_runs(url: str) -> tuple[perdure.App, str, threading.Thread, Any]:
    """A few runs on a real worker with the real clock; two reports held while we look."""
    app = perdure.App(url, schema=SCHEMA)
    define(app, pace=1)
    worker = app.worker(concurrency=6, poll_seconds=0.05, worker_id="api-7f3c2-worker-1")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(worker.run()), daemon=True)
    thread.start()
    graph = app.start("nightly_etl", {"day": "2026-05-01"}, key="etl:2026-05-01")
    for i in range(3):
        app.start("approval", {"doc": i}, key=f"contract:{4410 + i}")
    for name in ("weekly-sales", "churn"):
        app.start("report", name, key=f"report:{name}")
    deadline = time.monotonic() + 60
    while app.get_run(graph.id).status.value != "waiting" and time.monotonic() < deadline:
        time.sleep(0.1)
    app.signal(graph.id, "publish_ok", {"by": "ada"})
    graph.result(timeout=60)
    return app, graph.id, thread, (worker, loop)


def shoot(base: str, graph_id: str) -> None:
    """The three pictures."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
        page.goto(f"{base}/?range=1h")
        page.screenshot(path=str(HERE / "dashboard-overview.png"))
        page.goto(f"{base}/runs?limit=25")
        page.screenshot(path=str(HERE / "dashboard-runs.png"))
        page.goto(f"{base}/runs/{graph_id}")
        page.screenshot(
            path=str(HERE / "dashboard-graph-run.png"),
            full_page=False,
            clip={"x": 0, "y": 0, "width": 1280, "height": 1000},
        )
        browser.close()


def main() -> None:
    """Make the screenshots against argv[1], or the embedded PostgreSQL."""
    url = sys.argv[1] if len(sys.argv) > 1 else perdure.App().url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    simulate_hour(url)
    app, graph_id, thread, (worker, loop) = live_runs(url)
    server = BackgroundServer(app, DashboardConfig(port=0, refresh_seconds=0))
    server.wait_started()
    shoot(server.url.rstrip("/"), graph_id)
    server.stop()
    release.set()
    loop.call_soon_threadsafe(worker.request_stop)
    thread.join(30)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.close()
    print(f"screenshots written to {HERE}")


if __name__ == "__main__":
    main()
