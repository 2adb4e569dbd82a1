"""A typed workflow for the crash test: a Pydantic input and result, a dataclass step output.

Every execution of the workflow body records, in ``seen(run_id, pid, kind)``,
the type of the value its ``price`` step gave it: on replay after a crash the
value comes from the checkpoint, and must still be a ``Quote``. ``ledger``
counts real executions of the steps, as in crash_app.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psycopg
from pydantic import BaseModel, Field

import perdure

app = perdure.App()


class Order(BaseModel):
    """What a caller starts the workflow with."""

    sku: str
    quantity: int = Field(gt=0)


@dataclass
class Quote:
    """What the price step returns."""

    sku: str
    unit_cents: int
    tags: list[str]


class Receipt(BaseModel):
    """What the workflow returns."""

    sku: str
    total_cents: int
    quotes: list[Quote]


def _write(query: str, *args: object) -> None:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(query.replace("{schema}", schema), args)


def price(run_id: str, sku: str) -> Quote:
    """The checkpointed step whose output is a dataclass."""
    _write("INSERT INTO {schema}.ledger VALUES (%s, 'price', %s)", run_id, os.getpid())
    return Quote(sku=sku, unit_cents=250, tags=["fresh"])


def slow(run_id: str) -> int:
    """Record the start, then work for TYPED_SLOW_SECONDS: the crash lands in here."""
    _write("INSERT INTO {schema}.ledger VALUES (%s, 'slow', %s)", run_id, os.getpid())
    time.sleep(float(os.environ.get("TYPED_SLOW_SECONDS", "0")))
    return os.getpid()


@app.workflow("typed_order")
async def typed_order(ctx: perdure.Context, order: Order) -> Receipt:
    """price (a Quote) -> slow -> a Receipt built from the quote."""
    quote = await ctx.step("price", price, ctx.run_id, order.sku)
    _write(
        "INSERT INTO {schema}.seen (run_id, pid, kind) VALUES (%s, %s, %s)",
        ctx.run_id,
        os.getpid(),
        f"{type(order).__name__}/{type(quote).__name__}/{isinstance(quote, Quote)}",
    )
    await ctx.step("slow", slow, ctx.run_id)
    return Receipt(sku=quote.sku, total_cents=quote.unit_cents * order.quantity, quotes=[quote])
