"""The project's workflows: ``pay`` marks an order paid through the ORM, exactly once."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.models import F
from shop.models import Order

import perdure
from perdure.integrations.django import orm

app = perdure.App()


def mark_paid(conn: psycopg.Connection[Any], order_id: int, fail: bool) -> int:
    """The ORM's writes commit with the step's checkpoint, or not at all."""
    with orm(conn):
        Order.objects.filter(id=order_id).update(paid=True, payments=F("payments") + 1)
        if fail:
            raise perdure.PermanentError("the card was declined")
        return Order.objects.get(id=order_id).payments


@app.workflow("pay")
async def pay(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Pay order ``params["order"]`` in one transaction step."""
    payments = await ctx.transaction(
        "mark_paid", mark_paid, params["order"], params.get("fail", False)
    )
    return {"order": params["order"], "payments": payments}
