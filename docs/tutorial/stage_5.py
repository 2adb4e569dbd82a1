"""Stage 5: stock and payment at the same time, then one packing step per item.

Terminal 1:  perdure worker stage_5:app --concurrency 8
Terminal 2:  python stage_5.py 5   (waits for the order's result)
Terminal 3:  perdure runs signal order-5 packed --data '{"parcel": "P-5", "kg": 2.5}'
"""

from __future__ import annotations

import sys
import time

import perdure

app = perdure.App()


def reserve_stock(order: dict) -> str:
    print(f"reserving {len(order['items'])} items")
    time.sleep(0.5)  # a slow inventory service
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    print(f"charging order {order['id']}")
    time.sleep(0.5)  # a slow payment provider
    return f"charge-{order['id']}"


def pick_item(sku: str) -> str:
    print(f"picking {sku}")
    return f"bin-{sku}"


def ship(order: dict, parcel: dict) -> str:
    print(f"shipping parcel {parcel['parcel']} ({parcel['kg']} kg)")
    return f"track-{order['id']}"


PAYMENT_RETRIES = perdure.RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=5)


@app.workflow("order")
async def process_order(ctx: perdure.Context, order: dict) -> dict:
    # Two steps at once, on any workers; about 0.5 s instead of 1 s.
    hold, charge = await ctx.gather(
        ctx.step("reserve_stock", reserve_stock, order),
        ctx.step("charge_card", charge_card, order, retry=PAYMENT_RETRIES),
    )
    bins = await ctx.map("pick_item", pick_item, order["items"])  # pick_item[0], [1], ...
    parcel = await ctx.wait_for_signal("packed")
    tracking = await ctx.step("ship", ship, order, parcel)
    return {"hold": hold, "charge": charge, "bins": bins, "tracking": tracking}


if __name__ == "__main__":
    order_id = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    order = {"id": order_id, "items": ["tea", "mug", "kettle"]}
    run = app.start("order", order, key=f"order-{order_id}")
    print("started", run.id, "- waiting for the warehouse's 'packed' signal")
    print("result:", run.result(timeout=600))
