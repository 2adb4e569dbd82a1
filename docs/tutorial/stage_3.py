"""Stage 3: a flaky payment provider, retried; a declined card, not retried.

Terminal 1:  perdure worker stage_3:app
Terminal 2:  python stage_3.py 3        (and python stage_3.py 13 for a declined card)
"""

from __future__ import annotations

import sys

import perdure

app = perdure.App()
attempts: dict[int, int] = {}


def reserve_stock(order: dict) -> str:
    print(f"reserving {order['quantity']} x {order['sku']}")
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    attempts[order["id"]] = attempts.get(order["id"], 0) + 1
    if order["id"] == 13:
        raise perdure.PermanentError("card declined")  # retrying would not help
    if attempts[order["id"]] < 3:
        print(f"payment provider timed out (attempt {attempts[order['id']]})")
        raise TimeoutError("payment provider timed out")
    print(f"charging order {order['id']}")
    return f"charge-{order['id']}"


def ship(order: dict, hold: str) -> str:
    print(f"shipping {hold}")
    return f"track-{order['id']}"


PAYMENT_RETRIES = perdure.RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=5)


@app.workflow("order")
async def process_order(ctx: perdure.Context, order: dict) -> dict:
    hold = await ctx.step("reserve_stock", reserve_stock, order)
    charge = await ctx.step("charge_card", charge_card, order, retry=PAYMENT_RETRIES)
    tracking = await ctx.step("ship", ship, order, hold)
    return {"charge": charge, "tracking": tracking}


if __name__ == "__main__":
    order_id = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    run = app.start("order", {"id": order_id, "sku": "tea", "quantity": 2}, key=f"order-{order_id}")
    print("started", run.id)
    try:
        print("result:", run.result(timeout=60))
    except perdure.RunFailed as failed:
        print("the order failed:", failed)
