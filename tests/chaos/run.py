"""The long chaos run: ``python tests/chaos/run.py --minutes 10 [--seed N]`` (or ``make chaos``).

The same workload, faults and checker as the CI test (tests/chaos/test_chaos.py),
for as long as you like. Exits 0 when every invariant held, 1 otherwise; the
seed is printed first, and ``--seed`` replays its workload and faults.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: apps, chaos, helpers

from chaos.harness import ChaosConfig, run_chaos


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the workload, return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long runs keep starting")
    parser.add_argument("--seed", type=int, default=None, help="replay this seed")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--rate", type=float, default=2.0, help="runs started per second")
    args = parser.parse_args(argv)
    # The workload's own App logs every failed reconnection during outages;
    # the summary is what matters here.
    logging.basicConfig(level=logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    config = ChaosConfig(
        seed=seed,
        duration=args.minutes * 60,
        starts_per_second=args.rate,
        workers=args.workers,
        fault_gap=(2.0, 8.0),
        drain_seconds=300.0,
    )
    return 0 if run_chaos(config).ok else 1


if __name__ == "__main__":
    sys.exit(main())
