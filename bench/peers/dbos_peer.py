"""DBOS Transact: the 3-step no-op workflow through a DBOS queue, one process.

The runs are enqueued by a ``DBOSClient`` on a queue nobody serves; at the go
one UPDATE moves them to the queue this process serves (``worker_concurrency``
= ``--concurrency``), as perdure's bench makes its runs due with one UPDATE.
The queue is polled every 10 ms (DBOS's default is 1 s), its fastest useful
setting here. The peer then polls ``workflow_status`` until every run
succeeded, and reports its polls so that they are not counted as DBOS's.

With ``--fanout N``: DBOS's own fan-out, a workflow that enqueues N
workflows of one step each on a queue this process serves (polled every
10 ms) and waits for all their results.
"""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
from common import arguments, fan_out, finish
from dbos import DBOS, DBOSClient, DBOSConfig, Queue
from psycopg import sql

HOLD, SERVED, FAN = "bench_hold", "bench", "bench_fan"


@DBOS.step()
async def a() -> int:
    """No-op step."""
    return 1


@DBOS.step()
async def b() -> int:
    """No-op step."""
    return 1


@DBOS.step()
async def c() -> int:
    """No-op step."""
    return 1


@DBOS.workflow(name="noop3")
async def noop3() -> int:
    """Three no-op steps."""
    return await a() + await b() + await c()


@DBOS.step()
async def leaf_step(i: int) -> int:
    """No-op step."""
    return i


@DBOS.workflow(name="leaf")
async def leaf(i: int) -> int:
    """One step."""
    return await leaf_step(i)


@DBOS.workflow(name="fan")
async def fan(width: int) -> int:
    """Enqueue ``width`` leaves and wait for every one (DBOS's fan-out)."""
    queue = _fan_queue
    assert queue is not None
    handles = [await queue.enqueue_async(leaf, i) for i in range(width)]
    return sum([await handle.get_result() for handle in handles])


_fan_queue: Queue | None = None


def main() -> None:
    """Set up, enqueue, hand shake, execute."""
    global _fan_queue
    args = arguments()
    url = args.database_url
    sa_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    config: DBOSConfig = {
        "name": "perdure-bench",
        "system_database_url": sa_url,
        "dbos_system_schema": args.schema,
        "run_admin_server": False,
        "application_version": "bench",
    }
    DBOS(config=config)
    DBOS.launch()
    if args.fanout:
        _fan_queue = DBOS.register_queue(
            FAN, worker_concurrency=args.concurrency, polling_interval_sec=0.01
        )
        width = args.fanout
        asyncio.run(fan_out(lambda: fan(width), width, args.fanouts))
        DBOS.destroy()
        return
    DBOS.register_queue(SERVED, worker_concurrency=args.concurrency, polling_interval_sec=0.01)
    client = DBOSClient(system_database_url=sa_url, dbos_system_schema=args.schema)
    for _ in range(args.runs):
        client.enqueue({"queue_name": HOLD, "workflow_name": "noop3", "app_version": "bench"})
    client.destroy()
    status = sql.Identifier(args.schema, "workflow_status")
    polls = 0
    with psycopg.connect(url, autocommit=True) as conn:
        print("READY", flush=True)
        input()
        started = time.perf_counter()
        conn.execute(
            sql.SQL("UPDATE {} SET queue_name = %s WHERE queue_name = %s").format(status),
            (SERVED, HOLD),
        )
        while True:
            polls += 1
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE status = 'SUCCESS'").format(status)
            ).fetchone()
            if row is not None and row[0] >= args.runs:
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - started
    result = {"runs": args.runs, "seconds": seconds, "runs_per_s": args.runs / seconds}
    print(json.dumps({**result, "own_statements": polls + 1}), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main()
    finish()
