"""Bulk cancel and retry, and the cost of typed values.

Usage: python bench/bulk.py [--runs N] [--batch-size B] [--database-url URL]

Starts N runs (in one transaction, no worker), then times, on a schema of its
own: a dry run of bulk cancel, the bulk cancel, and a bulk retry of the runs it
cancelled, each in batches of B. Then it times the per-step overhead of typed
values: reading a step function's cached return hint, and rebuilding a
decoded output for an untyped and for a Pydantic-typed step.
"""

from __future__ import annotations

import argparse
import os
import time
import timeit
import uuid
from typing import Any

import psycopg
from pydantic import BaseModel

import perdure
from perdure.engine import typed

app = perdure.App()


@app.workflow("bulk_bench")
async def bulk_bench(ctx: perdure.Context, n: int) -> int:
    """Never executed here: the runs only wait in the queue."""
    return n


class Out(BaseModel):
    a: int
    b: str


def typed_step(x: int) -> Out:
    """A step whose output is a Pydantic model."""
    return Out(a=x, b="x")


def plain_step(x: int) -> dict[str, Any]:
    """A step whose output is plain JSON."""
    return {"a": x}


def _timed(label: str, call: Any) -> None:
    began = time.perf_counter()
    result = call()
    print(f"{label:<28} {time.perf_counter() - began:6.2f} s  ({result.count} runs)")


def _micro(label: str, call: Any, number: int = 100_000) -> None:
    print(f"{label:<28} {timeit.timeit(call, number=number) / number * 1e6:6.2f} us")


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--database-url", default=os.environ.get("PERDURE_DATABASE_URL"))
    args = parser.parse_args()
    schema = f"bulk_{uuid.uuid4().hex[:8]}"
    url = args.database_url or app.url
    app.configure(url=url, schema=schema)
    app.ensure_schema()
    try:
        with psycopg.connect(url) as conn:
            for i in range(args.runs):
                app.start("bulk_bench", i, conn=conn)
        every = perdure.RunFilter(workflow="bulk_bench")
        size = args.batch_size
        print(f"{args.runs} queued runs, batches of {size}:")
        _timed("cancel, dry run", lambda: app.cancel_runs(every, dry_run=True, batch_size=size))
        _timed("cancel", lambda: app.cancel_runs(every, batch_size=size))
        _timed("retry", lambda: app.retry_runs(every, batch_size=size))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        app.close()
    print("typed values, per step:")
    _micro("return hint (cached)", lambda: typed.return_hint(typed_step))
    untyped = typed.return_hint(plain_step)
    _micro("rebuild, untyped", lambda: untyped.rebuild({"a": 1}, "bench"))
    model = typed.return_hint(typed_step)
    _micro("rebuild, Pydantic model", lambda: model.rebuild({"a": 1, "b": "x"}, "bench"))


if __name__ == "__main__":
    main()
