"""A workflow with update handlers, for the tests of updates across worker processes.

``cart`` collects items until the signal ``checkout``; update ``add_item``
records the item in a ledger table (plain SQL, outside perdure, so it counts
executions), then passes a step that SIGKILLs its own worker the first time
an item named ``crash`` reaches it.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg

import perdure

app = perdure.App()


def _ledger(run_id: str, step: str) -> int:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.ledger (run_id, step, pid) VALUES (%s, %s, %s)",
            (run_id, step, os.getpid()),
        )
        found = conn.execute(
            f"SELECT count(*) FROM {schema}.ledger WHERE run_id = %s AND step = %s",
            (run_id, step),
        ).fetchone()
    return int(found[0]) if found else 0


def crash_once(run_id: str, item: str) -> None:
    """SIGKILL this worker the first time ``crash`` gets here (the ledger counts)."""
    if item == "crash" and _ledger(run_id, "crash-point") == 1:
        os.kill(os.getpid(), signal.SIGKILL)


@app.workflow("cart")
async def cart(ctx: perdure.Context, user: str) -> list[str]:
    """Collect items until checkout."""
    ctx.state["items"] = []
    await ctx.wait_for_signal("checkout")
    return list(ctx.state["items"])


@app.update_handler("cart")
async def add_item(ctx: perdure.Context, item: str) -> int:
    """Record the item, then (for ``crash``) the step that kills its worker once."""
    await ctx.step("record", _ledger, ctx.run_id, f"record:{item}")
    await ctx.step("crash-point", crash_once, ctx.run_id, item)
    ctx.state["items"].append(item)
    return len(ctx.state["items"])


@add_item.validator
def _nonempty(item: Any) -> None:
    if not isinstance(item, str) or not item:
        raise ValueError("an item is a non-empty string")


@app.update_handler("cart")
async def authorise(ctx: perdure.Context, amount: int) -> str:
    """Reply early, then pass the step that kills its worker once, then go on."""
    await ctx.step("record", _ledger, ctx.run_id, f"authorise:{amount}")
    await ctx.reply(f"authorised {amount}")
    await ctx.step("crash-point", crash_once, ctx.run_id, "crash")
    await ctx.step("after", _ledger, ctx.run_id, "after")
    ctx.state["items"].append(f"paid {amount}")
    return "not a reply"
