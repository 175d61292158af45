"""What the benchmarks share: the steps, a reader's offline environment, and commands timed side by side."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from workbook import paths  # noqa: E402  (the repo's root is on sys.path only from here)

BARE = ROOT / "bench" / "bare_replay.py"  # the floor of every replay figure


def steps() -> list[str]:
    """Every step: the six at the root, then the later ones in workbook/later/."""
    return list(paths.STEPS)


def default_fixture(step: str) -> str:
    """The fixture `python sNN_x.py` replays with no task: its DEFAULT_FIXTURE, read from the source."""
    found = re.search(r'^DEFAULT_FIXTURE = "([^"]+)"', paths.step_file(step).read_text(), re.M)
    if not found:
        raise ValueError(f"{step}.py names no DEFAULT_FIXTURE")
    return found.group(1)


def offline_env(**extra) -> dict:
    """A reader's environment with no API key, so every script replays its fixture offline."""
    drop = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_ID", "WORKBOOK_REBUILD")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"PYTHONIOENCODING": "utf-8", "COLUMNS": "100"} | extra


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    """The machine a figure was measured on: cores, Python, SDK, and its load average now."""
    import anthropic

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, anthropic {anthropic.__version__}, "
        f"load average {load}"
    )


def last_line(text: str, limit: int = 70) -> str:
    """The last non-empty line of some output, cut to `limit` characters: what a table cell can hold."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def shown(argv: list[str]) -> str:
    """A command as a reader would type it: `python`, paths relative to the repo."""
    words = ["python"] + [os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a for a in argv[1:]]
    return " ".join(f'"{w}"' if " " in w else w for w in words)


def side_by_side(commands: list[list[str]], env: dict, cwd: Path = ROOT) -> list[dict]:
    """Start the commands together (one per core) and time each to its end: its wall and CPU seconds
    (the process and the children it waited for, from os.wait4), peak RSS in MB, exit code and last line
    of output. A slow spell of a shared machine then falls on all of them alike: one after the other, it
    can fall on one of them alone, and by itself decide a ratio of two."""
    with tempfile.TemporaryDirectory(prefix="bench-out-") as tmp:
        outputs = [Path(tmp) / str(i) for i in range(len(commands))]  # a file, not a pipe: none fills up
        start = time.perf_counter()
        procs = []
        for argv, output in zip(commands, outputs):
            with output.open("w") as out:
                procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT))

        def reaped(proc: subprocess.Popen) -> dict:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            return {"wall": time.perf_counter() - start, "cpu": cpu, "peak_mb": usage.ru_maxrss / 1024}

        with ThreadPoolExecutor(len(procs)) as pool:  # each reaped as it ends: its own wall time
            results = list(pool.map(reaped, procs))
        for proc, output, result in zip(procs, outputs, results):
            result |= {"rc": proc.returncode, "last": last_line(output.read_text(errors="replace"))}
    return results


def paired(subject: list[dict], floor: list[dict]) -> dict:
    """A subject's runs against the floor's run beside each: CPU median of each, and the figure, the
    median of the rounds' own ratios; the first failure of either, if any."""
    cpu, floor_cpu = [r["cpu"] for r in subject], [r["cpu"] for r in floor]
    failed = [(what, r) for what, runs in (("subject", subject), ("floor", floor)) for r in runs if r["rc"]]
    return {
        "cpu": median(cpu),
        "floor_cpu": median(floor_cpu),
        "ratio": median(a / b for a, b in zip(cpu, floor_cpu)),
        "peak_mb": max(r["peak_mb"] for r in subject),
        "error": "; ".join(f"{what}: exit {r['rc']}: {r['last']}" for what, r in failed[:1]),
    }
