"""How long the ``perdure`` command takes to answer: wall time of whole processes.

Runs each command ``--runs`` times in a fresh interpreter and prints the
median and the spread. ``runs list`` needs a database: give one with
``--database-url`` (else only the commands that need none are timed).

    .venv/bin/python bench/cli_startup.py --runs 15
    .venv/bin/python bench/cli_startup.py --runs 15 --database-url postgresql://...
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds one run of ``argv`` takes, start to exit."""
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    """Time ``perdure --help`` and friends, and print their medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    perdure = [sys.executable, "-m", "perdure"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "perdure --help": [*perdure, "--help"],
        "perdure runs --help": [*perdure, "runs", "--help"],
    }
    if args.database_url:
        env["PERDURE_DATABASE_URL"] = args.database_url
        # `runs list` reads: it never creates the schema, so make sure there is one.
        subprocess.run([*perdure, "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        commands["perdure runs list"] = [*perdure, "runs", "list", "--limit", "5"]
    for label, argv in commands.items():
        timed(argv, env)  # warm the file cache
        times = sorted(timed(argv, env) for _ in range(args.runs))
        print(
            f"{label:24} median {statistics.median(times) * 1000:6.0f} ms"
            f"  min {times[0] * 1000:6.0f}  max {times[-1] * 1000:6.0f}"
        )


if __name__ == "__main__":
    main()
