"""The demo's workflows: an order checkout, a nightly ETL batch and a user signup.

``perdure demo`` runs these on real worker processes (``perdure worker
perdure.demo.workflows:app``) and kills one of them mid-flight. Every step
writes one row to the ``demo_ledger`` table as its side effect, with the
process id that ran it: the ledger is the evidence that a completed step never
ran again, while the step that was in flight on the killed worker did run a
second time (plain steps are at-least-once; ``ctx.transaction`` steps are
exactly-once because their writes commit with the checkpoint).

The workflows are deterministic in the order of their steps. Randomness (step
durations, payment gateway timeouts) lives inside the steps and is seeded from
the run's input, so a given ``--seed`` tells the same story every time.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import psycopg

import perdure
from perdure.clock import Clock
from perdure.store import caller
from perdure.store.statement import Statement
from perdure.store.statements import Statements

app = perdure.App()

#: The demo's own tables (sql/queries/demos.sql in the store), named so that
#: they cannot clash with a user's tables.
LEDGER = "demo_ledger"
ORDERS = "demo_orders"
PAYMENTS = "demo_payments"

#: The payment gateway times out now and then; four attempts, 0.2 s then 0.4 s then 0.8 s apart.
CHARGE_RETRY = perdure.RetryPolicy(max_attempts=4, initial_delay=0.2, multiplier=2)

# The workflows' relative frequency in a demo: half of the runs are checkouts.
_MIX = {"checkout": 2, "etl_batch": 1, "signup": 1}


class PaymentGatewayTimeout(ConnectionError):
    """The (simulated) payment gateway did not answer in time; the charge may be retried."""


def create_tables(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the demo's ledger, orders and payments tables in ``schema`` if missing."""
    for statement in Statements(schema, Clock()).demos.create_tables():
        caller.execute_sync(conn, statement)


def demo_inputs(runs: int, seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    """The ``(workflow, key, input)`` of each run a demo of ``runs`` runs starts."""
    rng = random.Random(seed)
    names = rng.choices(list(_MIX), weights=list(_MIX.values()), k=runs)
    made: list[tuple[str, str, dict[str, Any]]] = []
    for index, name in enumerate(names):
        number = 1001 + index
        data: dict[str, Any] = {"id": number, "seed": seed}
        if name == "checkout":
            data["items"] = rng.randint(1, 5)
            data["amount_cents"] = rng.randint(500, 25_000)
        elif name == "etl_batch":
            data["rows"] = rng.randint(50, 500)
        else:
            data["email"] = f"user{number}@example.com"
        made.append((name, f"{name}:{number}", data))
    return made


# Helpers the steps share ----------------------------------------------------------


def _rng(data: dict[str, Any], what: str) -> random.Random:
    # Seeded from the input, so a run draws the same numbers on every attempt.
    return random.Random(f"{data['seed']}:{data['id']}:{what}")


def _duration(data: dict[str, Any], step: str) -> float:
    return _rng(data, step).uniform(0.1, 0.4)


def _ledger_insert(run_id: str, step: str) -> Statement[None]:
    return app.statements.demos.record_step(run_id, step, os.getpid())


def _record(run_id: str, step: str) -> None:
    """Write the ledger row of a plain ``def`` step, on a short connection of its own."""
    with psycopg.connect(app.url, autocommit=True) as conn:
        caller.execute_sync(conn, _ledger_insert(run_id, step))


async def _record_async(run_id: str, step: str) -> None:
    """Write the ledger row of an ``async def`` step, on a short connection of its own."""
    async with await psycopg.AsyncConnection.connect(app.url, autocommit=True) as conn:
        await caller.execute_async(conn, _ledger_insert(run_id, step))


# checkout: async workflow, mixing async and plain steps -----------------------------


async def reserve_inventory(run_id: str, order: dict[str, Any]) -> dict[str, Any]:
    """Put the order's items on hold in the (simulated) inventory service."""
    await _record_async(run_id, "reserve_inventory")
    await asyncio.sleep(_duration(order, "reserve_inventory"))
    return {"hold_id": f"hold-{order['id']}", "items": order["items"]}


def charge_card(run_id: str, order: dict[str, Any]) -> dict[str, Any]:
    """Charge the customer's card; the gateway times out on about 30 % of first attempts.

    Each attempt is logged in ``demo_payments``, which is how the step knows
    how many attempts came before it. The run id serves as the idempotency
    key a real gateway would be given, so a charge repeated after a crash
    returns the same charge id.
    """
    draw = _rng(order, "gateway").random()
    planned_timeouts = 2 if draw < 0.05 else 1 if draw < 0.30 else 0
    demo = app.statements.demos
    with psycopg.connect(app.url, autocommit=True) as conn:
        timeouts = caller.execute_sync(conn, demo.payment_timeouts(run_id))
        if timeouts < planned_timeouts:
            caller.execute_sync(conn, demo.record_payment(run_id, "timeout", os.getpid()))
            time.sleep(0.1)
            raise PaymentGatewayTimeout(
                f"payment gateway timed out charging order {order['id']} (attempt {timeouts + 1})"
            )
        # The charge and its ledger row commit together, so the ledger counts
        # every charge the gateway made, even one cut short by a crash.
        with conn.transaction():
            caller.execute_sync(conn, demo.record_payment(run_id, "charged", os.getpid()))
            caller.execute_sync(conn, _ledger_insert(run_id, "charge_card"))
    time.sleep(_duration(order, "charge_card"))
    return {"charge_id": f"ch_{run_id.replace('-', '')[-12:]}", "amount": order["amount_cents"]}


async def record_order(
    conn: psycopg.AsyncConnection[Any], run_id: str, order: dict[str, Any], charge_id: str
) -> dict[str, Any]:
    """Insert the order row; runs in the checkpoint's transaction, so exactly once."""
    statement = app.statements.demos.record_order(
        order["id"], run_id, order["amount_cents"], charge_id
    )
    await caller.execute_async(conn, statement)
    # The ledger row shares the transaction too: if the worker dies before the
    # commit, both the order and its ledger row vanish with the checkpoint.
    await caller.execute_async(conn, _ledger_insert(run_id, "record_order"))
    await asyncio.sleep(_duration(order, "record_order") / 3)
    return {"order_id": order["id"]}


async def send_receipt(run_id: str, order: dict[str, Any]) -> dict[str, Any]:
    """E-mail the receipt (simulated)."""
    await _record_async(run_id, "send_receipt")
    await asyncio.sleep(_duration(order, "send_receipt"))
    return {"to": f"customer{order['id']}@example.com"}


def notify_warehouse(run_id: str, order: dict[str, Any], hold_id: str) -> dict[str, Any]:
    """Ask the warehouse to pick and ship the held items (simulated)."""
    _record(run_id, "notify_warehouse")
    time.sleep(_duration(order, "notify_warehouse"))
    return {"pick_list": f"pick-{order['id']}", "hold_id": hold_id}


@app.workflow("checkout", version=1)
async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
    """Reserve, charge, record the order exactly once, send the receipt, ship."""
    hold = await ctx.step("reserve_inventory", reserve_inventory, ctx.run_id, order)
    charge = await ctx.step("charge_card", charge_card, ctx.run_id, order, retry=CHARGE_RETRY)
    await ctx.transaction("record_order", record_order, ctx.run_id, order, charge["charge_id"])
    await ctx.step("send_receipt", send_receipt, ctx.run_id, order)
    await ctx.step("notify_warehouse", notify_warehouse, ctx.run_id, order, hold["hold_id"])
    return {"order_id": order["id"], "charge_id": charge["charge_id"]}


# etl_batch: a plain def workflow on a SyncContext -----------------------------------


def extract(run_id: str, batch: dict[str, Any]) -> list[dict[str, Any]]:
    """Read the batch's sales rows from the (simulated) source system."""
    _record(run_id, "extract")
    time.sleep(_duration(batch, "extract"))
    rng = _rng(batch, "rows")
    regions = ("north", "south", "east", "west")
    return [
        {"region": rng.choice(regions), "cents": rng.randint(100, 10_000)}
        for _ in range(batch["rows"])
    ]


def transform(run_id: str, batch: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, int]:
    """Total the sales per region."""
    _record(run_id, "transform")
    time.sleep(_duration(batch, "transform"))
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["region"]] = totals.get(row["region"], 0) + row["cents"]
    return totals


def load(conn: psycopg.Connection[Any], run_id: str, batch: dict[str, Any]) -> int:
    """Load the totals; a plain ``def`` transaction step, so its writes commit exactly once."""
    # A real pipeline would insert the totals here; the ledger row stands in
    # for them, written in the same transaction as the step's checkpoint.
    caller.execute_sync(conn, _ledger_insert(run_id, "load"))
    time.sleep(_duration(batch, "load") / 3)
    return int(batch["rows"])


def publish_report(run_id: str, batch: dict[str, Any], totals: dict[str, int]) -> str:
    """Publish the batch's report (simulated)."""
    _record(run_id, "publish_report")
    time.sleep(_duration(batch, "publish_report"))
    return f"report-{batch['id']}: {len(totals)} regions"


@app.workflow("etl_batch", version=1)
def etl_batch(ctx: perdure.SyncContext, batch: dict[str, Any]) -> dict[str, Any]:
    """Extract, transform, load exactly once, publish: blocking code, durable all the same."""
    rows = ctx.step("extract", extract, ctx.run_id, batch)
    totals = ctx.step("transform", transform, ctx.run_id, batch, rows)
    loaded = ctx.transaction("load", load, ctx.run_id, batch)
    report = ctx.step("publish_report", publish_report, ctx.run_id, batch, totals)
    return {"loaded": loaded, "report": report}


# signup: async workflow ---------------------------------------------------------------


async def create_account(run_id: str, user: dict[str, Any]) -> str:
    """Create the user's account (simulated)."""
    await _record_async(run_id, "create_account")
    await asyncio.sleep(_duration(user, "create_account"))
    return f"acct-{user['id']}"


def send_welcome_email(run_id: str, user: dict[str, Any]) -> str:
    """Send the welcome e-mail (simulated)."""
    _record(run_id, "send_welcome_email")
    time.sleep(_duration(user, "send_welcome_email"))
    return str(user["email"])


async def provision_workspace(run_id: str, user: dict[str, Any], account: str) -> str:
    """Provision the new account's workspace (simulated)."""
    await _record_async(run_id, "provision_workspace")
    await asyncio.sleep(_duration(user, "provision_workspace"))
    return f"ws-{account}"


@app.workflow("signup", version=1)
async def signup(ctx: perdure.Context, user: dict[str, Any]) -> dict[str, Any]:
    """Create the account, welcome the user, provision their workspace."""
    account = await ctx.step("create_account", create_account, ctx.run_id, user)
    await ctx.step("send_welcome_email", send_welcome_email, ctx.run_id, user)
    workspace = await ctx.step(
        "provision_workspace", provision_workspace, ctx.run_id, user, account
    )
    return {"account": account, "workspace": workspace}
