"""Stage 6: the pipeline, defined on any App so that a test can give it one.

An order the warehouse does not pack within two days is refunded.
Tests: pytest test_stage_6.py
"""

from __future__ import annotations

import perdure


def reserve_stock(order: dict) -> str:
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    return f"charge-{order['id']}"


def refund(charge: str) -> str:
    return f"refund-of-{charge}"


def pick_item(sku: str) -> str:
    return f"bin-{sku}"


def ship(order: dict, parcel: dict) -> str:
    return f"track-{order['id']}"


PAYMENT_RETRIES = perdure.RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=5)
TWO_DAYS = 2 * 86400


def define(app: perdure.App) -> None:
    """Define the order workflow on ``app``."""

    @app.workflow("order")
    async def process_order(ctx: perdure.Context, order: dict) -> dict:
        hold, charge = await ctx.gather(
            ctx.step("reserve_stock", reserve_stock, order),
            ctx.step("charge_card", charge_card, order, retry=PAYMENT_RETRIES),
        )
        bins = await ctx.map("pick_item", pick_item, order["items"])
        try:
            parcel = await ctx.wait_for_signal("packed", timeout=TWO_DAYS)
        except perdure.SignalTimeout:
            refunded = await ctx.step("refund", refund, charge)
            return {"status": "refunded", "refund": refunded}
        tracking = await ctx.step("ship", ship, order, parcel)
        return {"status": "shipped", "hold": hold, "bins": bins, "tracking": tracking}


app = perdure.App()
define(app)
