"""What waiting for a run's event costs the waiter: latency and statements.

A run waits for a signal, then publishes an event. The bench's caller waits
in ``app.get_event`` meanwhile; after ``--wait`` seconds the signal is sent.
Latency is from the send to ``get_event``'s return; load is the statements
the waiting App sent while it waited (its pool's count), per second.
Run it against two versions of perdure to compare them:

    .venv/bin/python bench/messages.py --rounds 7 --database-url postgresql://...
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

from harness import drop_schema, standalone

import perdure


def main() -> None:
    """Measure and print the waiter's latency and load."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--wait", type=float, default=2.0)
    with standalone(parser) as (args, server, probe):
        schema = "bench_messages"
        app = perdure.App(server.url, schema=schema, auto_migrate=True)

        @app.workflow(name="bench.announce")
        async def announce(ctx: perdure.Context) -> None:
            await ctx.wait_for_signal("go")
            await ctx.set_event("ready", True)

        worker = app.worker(concurrency=4, poll_seconds=0.05)
        loop = asyncio.new_event_loop()
        serving = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
        serving.start()
        latencies: list[float] = []
        loads: list[float] = []
        try:
            for _ in range(args.rounds):
                run = app.start("bench.announce")
                got: dict[str, Any] = {}

                def wait(run_id: str = run.id, got: dict[str, Any] = got) -> None:
                    app.get_event(run_id, "ready", timeout=60)
                    got["at"] = time.perf_counter()

                store = app._core.store
                waiter = threading.Thread(target=wait)
                before = store.statement_count if store is not None else 0
                began = time.perf_counter()
                waiter.start()
                time.sleep(args.wait)
                sent = time.perf_counter()
                app.signal(run.id, "go")
                waiter.join()
                store = app._core.store
                assert store is not None
                latencies.append(got["at"] - sent)
                loads.append((store.statement_count - before) / (got["at"] - began))
        finally:
            loop.call_soon_threadsafe(worker.request_stop)
            serving.join()
            app.close()
            drop_schema(probe, schema)
        print(
            f"get_event: latency median {statistics.median(latencies) * 1000:.1f} ms "
            f"(min {min(latencies) * 1000:.1f}, max {max(latencies) * 1000:.1f}); "
            f"waiter load median {statistics.median(loads):.1f} statements/s "
            f"over {args.rounds} rounds of {args.wait:g} s"
        )


if __name__ == "__main__":
    main()
