"""Stage 2: the worker dies in the middle of an order, and another one finishes it.

Terminal 1:  PULL_THE_PLUG=1 perdure worker stage_2:app --lease-seconds 5
Terminal 2:  python stage_2.py 2
Terminal 1, once the first worker died:  perdure worker stage_2:app --lease-seconds 5
"""

from __future__ import annotations

import os
import signal
import sys

import perdure

app = perdure.App()


def reserve_stock(order: dict) -> str:
    print(f"reserving {order['quantity']} x {order['sku']}")
    return f"hold-{order['id']}"


def charge_card(order: dict) -> str:
    print(f"charging order {order['id']}")
    return f"charge-{order['id']}"


def ship(order: dict, hold: str) -> str:
    if os.environ.get("PULL_THE_PLUG"):
        print("the worker dies while shipping", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no goodbye: like a power cut
    print(f"shipping {hold}")
    return f"track-{order['id']}"


@app.workflow("order")
async def process_order(ctx: perdure.Context, order: dict) -> dict:
    hold = await ctx.step("reserve_stock", reserve_stock, order)
    charge = await ctx.step("charge_card", charge_card, order)
    tracking = await ctx.step("ship", ship, order, hold)
    return {"charge": charge, "tracking": tracking}


if __name__ == "__main__":
    order_id = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    run = app.start("order", {"id": order_id, "sku": "tea", "quantity": 2}, key=f"order-{order_id}")
    print("started", run.id)
    print("result:", run.result(timeout=120))
