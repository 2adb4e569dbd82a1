"""Stage 7: a morning of orders to look at in the dashboard.

python stage_7.py               (ten orders: seven shipped, three waiting for the warehouse)
perdure worker stage_7:app      (terminal 1: ships a waiting order once it is signalled)
perdure dashboard               (terminal 2: then open http://127.0.0.1:8080/)
"""

from __future__ import annotations

import perdure
from perdure import testing
from stage_6 import define

app = perdure.App()
define(app)

if __name__ == "__main__":
    runs = []
    for order_id in range(70, 80):
        order = {"id": order_id, "items": ["tea", "mug"][: 1 + order_id % 2]}
        runs.append(app.start("order", order, key=f"order-{order_id}"))
    testing.drain(app)  # a worker in this process, until every order waits for 'packed'
    for run in runs[:7]:
        app.signal(run.id, "packed", {"parcel": f"P-{run.id[:6]}", "kg": 1.0})
    testing.drain(app)
    print({run.id: run.status() for run in runs})
