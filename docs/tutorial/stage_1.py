"""Stage 1: an order pipeline of three steps.

Terminal 1:  perdure worker stage_1:app
Terminal 2:  python stage_1.py
"""

from __future__ import annotations

import sys

import perdure

app = perdure.App()  # PERDURE_DATABASE_URL, or the embedded PostgreSQL


def reserve_stock(order: dict) -> str:
    print(f"reserving {order['quantity']} x {order['sku']}")
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    print(f"charging order {order['id']}")
    return f"charge-{order['id']}"


def ship(order: dict, hold: str) -> str:
    print(f"shipping {hold}")
    return f"track-{order['id']}"


@app.workflow("order")
async def process_order(ctx: perdure.Context, order: dict) -> dict:
    hold = await ctx.step("reserve_stock", reserve_stock, order)
    charge = await ctx.step("charge_card", charge_card, order)
    tracking = await ctx.step("ship", ship, order, hold)
    return {"charge": charge, "tracking": tracking}


if __name__ == "__main__":
    order_id = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    run = app.start("order", {"id": order_id, "sku": "tea", "quantity": 2}, key=f"order-{order_id}")
    print("started", run.id)
    print("result:", run.result(timeout=60))
