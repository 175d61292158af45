"""What building the contract's checks costs a step's default replay: issue 48 asks for the figure
before anything is cached or committed again (more than 10 % of a replay would be worth a word).

The checks are pydantic-core validators made in the process from the installed SDK's types
(workbook/api/sdk_types.py), each the first time it is asked for. For each step, in a process of its
own: the step's default replay, with the time spent making each check counted, against the CPU of the
replay's own process (the SDK's import included, as a student pays it; its tools' processes are not
counted, which makes the share larger, not smaller).

    python -m bench.contract_cost [STEP ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from bench.common import ROOT, offline_env, steps

SHARE = 0.10  # the line: a tenth of the replay
ONE_STEP = """
import contextlib, io, json, resource, sys, time
sys.argv = [sys.argv[1]]
from workbook import paths
from workbook.api import sdk_types
spent = []
def counted(make):
    def made(name):
        started = time.process_time()
        try:
            return make(name)
        finally:
            spent.append(time.process_time() - started)
    return made
# each is cached: a call after the first is free, so the sum is what making them cost
sdk_types.validator = counted(sdk_types.validator)
sdk_types.message_validator = counted(sdk_types.message_validator)
step = __import__("importlib").import_module(paths.step_module(sys.argv[0]))
with contextlib.redirect_stdout(io.StringIO()):
    step.main([])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"checks": sum(spent), "cpu": usage.ru_utime + usage.ru_stime}))
"""


def measure(names: list[str] | None = None) -> dict:
    """step -> (seconds making the checks, seconds of the replay's CPU)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for name in names or steps():
            done = subprocess.run(
                [sys.executable, "-c", ONE_STEP, name],
                cwd=ROOT,
                env=offline_env(TMPDIR=tmp),
                capture_output=True,
                text=True,
                check=True,
            )
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            out[name] = figures["checks"], figures["cpu"]
    return out


def report(results: dict) -> list[str]:
    lines = [
        f"{'step':<18} {'checks made':>11} {'replay CPU':>11} {'share':>6}  (the issue's line: {SHARE:.0%})"
    ]
    for name, (checks, cpu) in results.items():
        lines.append(f"{name:<18} {checks * 1000:>8.0f} ms {cpu * 1000:>8.0f} ms {checks / cpu:>6.1%}")
    return lines


if __name__ == "__main__":
    print("\n".join(report(measure(sys.argv[1:] or None))))
