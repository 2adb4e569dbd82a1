"""pgqrs (Rust core, Python bindings): the 3-step no-op workflow through its queue.

One process dequeues workflow messages with ``--concurrency`` consumers at a
time; each message becomes a run (``pgqrs.run()``), executed through the
``@workflow`` / ``@step`` decorators, and is archived when the run succeeded.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pgqrs
from common import arguments, finish, handshake
from pgqrs.decorators import step, workflow

WORKFLOW = "bench_noop3"


@step
async def a(ctx: Any) -> int:
    """No-op step."""
    return 1


@step
async def b(ctx: Any) -> int:
    """No-op step."""
    return 1


@step
async def c(ctx: Any) -> int:
    """No-op step."""
    return 1


@workflow(name=WORKFLOW)
async def noop3(ctx: Any, _: Any = None) -> int:
    """Three no-op steps."""
    return await a(ctx) + await b(ctx) + await c(ctx)


def _with_host(url: str) -> str:
    """pgqrs (sqlx) wants a host in the URL even for a unix socket given as ?host=/path."""
    parts = urlsplit(url)
    if parts.hostname is None and "host=" in parts.query:
        return urlunsplit(parts._replace(netloc=f"{parts.netloc}localhost"))
    return url


async def main() -> None:
    """Set up, enqueue, hand shake, execute."""
    args = arguments()
    config = pgqrs.Config(_with_host(args.database_url), schema=args.schema)
    store = await pgqrs.connect_with(config)
    await pgqrs.admin(store).install()
    await pgqrs.workflow().name(WORKFLOW).store(store).create()
    for _ in range(args.runs):
        await pgqrs.workflow().name(WORKFLOW).store(store).trigger({"n": 1}).execute()
    remaining = args.runs

    async def consume() -> None:
        nonlocal remaining
        consumer = await store.consumer(WORKFLOW)
        while remaining > 0:
            messages = await consumer.dequeue(1)
            if not messages:
                await asyncio.sleep(0.001)
                continue
            for message in messages:
                run = await pgqrs.run().message(message).store(store).execute()
                await noop3(run)
                await consumer.archive(message.id)
                remaining -= 1

    async def execute() -> None:
        await asyncio.gather(*(consume() for _ in range(args.concurrency)))

    await handshake(execute, args.runs)


if __name__ == "__main__":
    asyncio.run(main())
    finish()
