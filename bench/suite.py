"""Test suite time: the README's test command, `pytest` at the repo root, timed whole (goal <= 120 s on
2 cores, median of 3 runs on a quiet machine; green beside two busy processes).

Each run is timed whole (wall), with the CPU it and its children used (the grader's sandboxed programs
are not its waited-for children, so they are missing from that figure), the machine's core count and
its load average before and after: a figure without them says little. The last run also reports its
slowest tests (`--durations`), which is where to look first when the figure grows.

With `busy=N` (`python -m bench.suite RUNS N`), N processes spinning on a core each
(`python -c "while True: pass"`) run beside the suite, started before it and killed by their pids after:
the suite must stay green beside them (the goal is "green", not a time).

Slow, so `bench/run.py` runs it only with --suite; `python -m bench.suite [RUNS [BUSY]]` runs it alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, offline_env

GOAL = 120.0
SLOWEST = 12  # tests named in the report


def command(durations: int = 0) -> list[str]:
    """`pytest` from the same environment as this Python (the venv's script, else `python -m pytest`)."""
    script = Path(sys.executable).with_name("pytest")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "pytest"]
    return base + ([f"--durations={durations}"] if durations else [])


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_run(durations: int = 0) -> dict:
    load_before, cpu_before = os.getloadavg()[0], children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command(durations), cwd=ROOT, env=offline_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1].strip("= ")
    return {
        "wall": wall,
        "cpu": children_cpu() - cpu_before,
        "rc": done.returncode,
        "summary": summary,
        "load": (load_before, os.getloadavg()[0]),
        "slowest": slowest_tests(done.stdout),
        "failed": [
            line.split()[1] for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))
        ],
    }


def slowest_tests(output: str) -> list[str]:
    """The `--durations` lines pytest printed ("12.34s setup tests/x.py::test_y"), slowest first."""
    return [
        line.strip() for line in output.splitlines() if re.match(r"\s*\d+\.\d+s (setup|call|teardown) ", line)
    ]


@contextlib.contextmanager
def busy_processes(count: int):
    """`count` processes each spinning on a core for the duration, then killed by their pids."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [p.pid for p in spinners]
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def measure(runs: int = 1, busy: int = 0) -> dict:
    """`runs` runs of the whole suite (beside `busy` spinning processes): the median's figures, each run's
    wall and load, and the slowest tests of the last run."""
    with busy_processes(busy):
        done = [one_run(SLOWEST if i == runs - 1 else 0) for i in range(runs)]
    walls = [r["wall"] for r in done]
    return {
        "wall": statistics.median(walls),
        "walls": walls,
        "cpu": statistics.median(r["cpu"] for r in done),
        "rc": max(r["rc"] for r in done),
        "summary": done[-1]["summary"],
        "cores": os.cpu_count(),
        "loads": [r["load"] for r in done],
        "slowest": done[-1]["slowest"],
        "failed": sorted({name for r in done for name in r["failed"]}),
        "busy": busy,
    }


def report(r: dict) -> str:
    walls = ", ".join(f"{w:.1f}" for w in r["walls"])
    loads = ", ".join(f"{a:.1f}→{b:.1f}" for a, b in r["loads"])
    runs = len(r["walls"])
    lines = [
        f"pytest: median {r['wall']:.1f} s wall of {runs} run(s) ({walls} s) on {r['cores']} cores"
        + (f" beside {r['busy']} busy processes," if r.get("busy") else ","),
        f"  load average before→after: {loads}; CPU {r['cpu']:.0f} s (sandboxed programs not counted);",
        f"  {r['summary']}; slowest tests (last run):",
    ]
    failed = [f"  failed: {name}" for name in r.get("failed", [])]
    return "\n".join(failed + lines + [f"    {line}" for line in r["slowest"]])


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(report(measure(*(args or [3]))))
