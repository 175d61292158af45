"""5. Test suite time: the README's test command, `pytest` at the repo root, timed whole (goal <= 60 s).

Slow and recursive (the suite includes tests/test_bench.py), so `bench/run.py` runs it only with --suite.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, offline_env

GOAL = 60.0


def command() -> list[str]:
    """`pytest` from the same environment as this Python (the venv's script, else `python -m pytest`)."""
    script = Path(sys.executable).with_name("pytest")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pytest"]


def measure() -> dict:
    start = time.perf_counter()
    done = subprocess.run(command(), cwd=ROOT, env=offline_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1].strip("= ")
    return {"wall": wall, "rc": done.returncode, "summary": summary}
