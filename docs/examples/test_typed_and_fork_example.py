"""The examples of docs/typed.md and docs/management.md, run by perdure's CI.

A typed order workflow (Pydantic input and result, a dataclass step output, a
typed signal), then a fork of a failed run from the step that failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

import perdure
from perdure import testing

PRICED: list[str] = []
BROKEN = {"charge": True}


class Order(BaseModel):
    sku: str
    quantity: int = Field(gt=0)


@dataclass
class Quote:
    sku: str
    unit_cents: int


class Receipt(BaseModel):
    total_cents: int
    quotes: list[Quote]


class Approval(BaseModel):
    approver: str


def price(sku: str) -> Quote:
    PRICED.append(sku)
    return Quote(sku, 250)


def charge(cents: int) -> str:
    if BROKEN["charge"]:
        raise perdure.PermanentError("card processor rejected the request")
    return f"ch_{cents}"


def define(app: perdure.App) -> None:
    @app.workflow("order")
    async def order(ctx: perdure.Context, order: Order) -> Receipt:
        quote = await ctx.step("price", price, order.sku)
        await ctx.wait_for_signal("approve", type=Approval)
        await ctx.step("charge", charge, quote.unit_cents * order.quantity)
        return Receipt(total_cents=quote.unit_cents * order.quantity, quotes=[quote])


def test_typed_order_then_fork_from_the_failed_step(perdure_app: perdure.App) -> None:
    define(perdure_app)
    run = perdure_app.start("order", {"sku": "tea", "quantity": 3})
    perdure_app.signal(run.id, "approve", Approval(approver="ann"))
    testing.drain(perdure_app)
    assert run.status() == perdure.RunStatus.FAILED  # charge failed

    BROKEN["charge"] = False  # the fix is deployed: fork from the step that failed
    fork = perdure_app.fork(run.id, from_step="charge")
    receipt = perdure_app.run_until_complete(fork)
    assert receipt == Receipt(total_cents=750, quotes=[Quote("tea", 250)])
    assert PRICED == ["tea"], "the fork reused the recorded price"
    assert fork.get().forked_from == run.id
