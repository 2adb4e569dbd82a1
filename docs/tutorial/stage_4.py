"""Stage 4: the order waits for the warehouse to say the parcel is packed.

Terminal 1:  perdure worker stage_4:app
Terminal 2:  python stage_4.py 4
Terminal 3:  perdure runs signal order-4 packed --data '{"parcel": "P-4", "kg": 1.2}'
"""

from __future__ import annotations

import sys

import perdure

app = perdure.App()


def reserve_stock(order: dict) -> str:
    print(f"reserving {order['quantity']} x {order['sku']}")
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    print(f"charging order {order['id']}")
    return f"charge-{order['id']}"


def ship(order: dict, parcel: dict) -> str:
    print(f"shipping parcel {parcel['parcel']} ({parcel['kg']} kg)")
    return f"track-{order['id']}"


PAYMENT_RETRIES = perdure.RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=5)


@app.workflow("order")
async def process_order(ctx: perdure.Context, order: dict) -> dict:
    await ctx.step("reserve_stock", reserve_stock, order)
    charge = await ctx.step("charge_card", charge_card, order, retry=PAYMENT_RETRIES)
    # No thread, connection or worker slot is held while the run waits.
    parcel = await ctx.wait_for_signal("packed")
    tracking = await ctx.step("ship", ship, order, parcel)
    return {"charge": charge, "tracking": tracking}


if __name__ == "__main__":
    order_id = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    run = app.start("order", {"id": order_id, "sku": "tea", "quantity": 2}, key=f"order-{order_id}")
    print("started", run.id, "- waiting for the warehouse's 'packed' signal")
    print("result:", run.result(timeout=600))
