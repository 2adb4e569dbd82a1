"""What one ``app.start`` costs, from the caller's side: wall time per start.

Starts runs one after the other (no worker): each in its own transaction
(by the workflow's code, by name alone, with a key), then all of a round in
the caller's one transaction, where the commit's disk flush does not hide
the statement's own cost. Prints the median per-start time of the rounds.
Run it before and after a change to the start path:

    .venv/bin/python bench/start_cost.py --starts 500 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from harness import standalone

import perdure


def main() -> None:
    """Measure and print the cost of a start."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    with standalone(parser) as (args, server, _probe):
        app = perdure.App(server.url, schema="bench_start", auto_migrate=True)

        @app.workflow(name="bench.start")
        def noop(ctx: perdure.SyncContext, data: object) -> object:
            return data

        app.register()
        caller = perdure.App(server.url, schema="bench_start")
        timings: dict[str, list[float]] = {
            "with code": [],
            "by name": [],
            "keyed": [],
            "in one transaction": [],
        }
        for round_ in range(args.rounds):
            for label, starter, keyed in (
                ("with code", app, False),
                ("by name", caller, False),
                ("keyed", app, True),
            ):
                began = time.perf_counter()
                for i in range(args.starts):
                    key = f"{round_}-{i}" if keyed else None
                    starter.start("bench.start", {"i": i}, key=key)
                elapsed = time.perf_counter() - began
                timings[label].append(elapsed / args.starts * 1e6)
            with psycopg.connect(server.url) as conn:
                began = time.perf_counter()
                for i in range(args.starts):
                    app.start("bench.start", {"i": i}, conn=conn)
                elapsed = time.perf_counter() - began
                conn.rollback()
            timings["in one transaction"].append(elapsed / args.starts * 1e6)
        for label, values in timings.items():
            print(
                f"{label:>18}: median {statistics.median(values):7.1f} us per start "
                f"(rounds: {', '.join(f'{v:.0f}' for v in values)})"
            )
        caller.close()
        app.close()


if __name__ == "__main__":
    main()
