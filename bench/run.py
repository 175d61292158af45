"""Every benchmark of docs/benchmarks.md, one after the other, with the machine they ran on.

python bench/run.py            replay cost, the contract's build, the long replay, the classroom server
python bench/run.py --quick    fewer rounds (a check that everything runs, not figures to quote)
python bench/run.py --suite    also the suite's time (slow)
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import contract_cost, long_replay, replay_cost, server_load, suite  # noqa: E402
from bench.common import machine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--suite", action="store_true", help="also time the whole test suite (slow)")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 7
    print(f"machine: {machine()}")
    print("\n".join(replay_cost.report(replay_cost.measure(rounds))))
    print("\n".join(contract_cost.report(contract_cost.measure())))
    print(f"machine: {machine()}")
    print("\n".join(long_replay.report(long_replay.measure(rounds=1 if args.quick else 3))))
    print(f"machine: {machine()}")
    if shutil.which("wrk"):
        print(
            "\n".join(server_load.report(server_load.measure(rounds=1 if args.quick else server_load.ROUNDS)))
        )
    else:
        print("wrk is not installed (apt-get install wrk): the classroom server was not measured")
    if args.suite:
        print(f"machine: {machine()}")
        print(suite.report(suite.measure(3)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
