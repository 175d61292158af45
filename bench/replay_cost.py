"""1. Replay cost: each step's offline replay as a whole process, against a fair floor.

The floor is the SDK's import measured the way a replay runs: `import anthropic` and then
`gc.freeze()`, as launch.start freezes what the imports made, so that neither pays a collection of it
at exit. (`python -c "import anthropic"` alone pays one a replay skips: against it the steps looked
cheaper than the SDK they import.) Beside it, for reference: the bare import, and the least an import
can cost (the collector off while the SDK loads, then frozen, as a step does: workbook/__init__.py).

`measure_help(reps)` times each step's `python sNN_x.py --help` the same way, against the bare
`python -c "import anthropic"`, for reference: `--help` may cost the SDK's import (it is not a goal).

`measure(reps)` times the floors and every step (`python sNN_x.py`, no key) in interleaved rounds and
returns the best (CPU) and median (wall) of each and their ratio to the floor. `breakdown(step)` runs
the replay once more in a child process (`python -m bench.replay_cost STEP`) that times, exclusively
(a nested call's time is charged to the inner category, never twice):

    imports:    anthropic (the floor) / rich / replay / the script's other imports
    in main():  fixture load (of which: pydantic validation of every body) / workspace copy /
                replay transport (request JSON parse, API-rule check, diff) / SDK (request building,
                parsing) / tools (the real bash) / rendering (rich) / other (argparse, the loop itself)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, interleaved, last_line, median, offline_env, steps, timing

FLOOR = [sys.executable, "-c", "import gc, anthropic; gc.freeze()"]
REFERENCES = {  # other floors, shown for comparison only
    "bare import": [sys.executable, "-c", "import anthropic"],
    "import, collector off": [sys.executable, "-c", "import gc; gc.disable(); import anthropic; gc.freeze()"],
}
GOAL = 1.10  # a replay should cost at most 10 % more CPU than importing the SDK (best of the runs)
# `--help`, for reference only: against the bare import, the same process shape (`python ...`, run to
# its end, nothing frozen). It was a goal while the SDK loaded lazily; it is not one now.
HELP_FLOOR = [sys.executable, "-c", "import anthropic"]
HELP_GOAL = 0.5
CLI_HELP = (
    "check",
    "serve",
    "grade",
)  # `python -m workbook CMD --help` for these too: they load the SDK to run

RICH_MODULES = ("rich.console", "rich.markup", "rich.table", "rich.status", "rich.live", "rich.spinner")


def measure(reps: int = 7, names: list[str] | None = None, what_if: str | None = None) -> dict:
    """Medians of the floor and each step's replay (wall and CPU), interleaved, with ratios to the floor.

    With `what_if`, the first and last step also run through bench/launch.py twice, alone ("NAME
    (launcher)") and with the change ("NAME + what_if"), so the change is compared like with like.
    """
    names = names or steps()
    commands = {"floor": FLOOR} | REFERENCES | {n: [sys.executable, str(ROOT / f"{n}.py")] for n in names}
    for n in sorted({names[0], names[-1]}) if what_if else []:
        launch = [sys.executable, "-m", "bench.launch"]
        commands[f"{n} (launcher)"] = [*launch, "none", f"{n}.py"]
        commands[f"{n} + {what_if}"] = [*launch, what_if, f"{n}.py"]
    return against_floor(commands, reps)


def measure_help(reps: int = 3, names: list[str] | None = None) -> dict:
    """`python sNN_x.py --help` for each step (and `python -m workbook CMD --help` for CLI_HELP) against
    HELP_FLOOR, interleaved, as `measure` does."""
    commands = {"floor": HELP_FLOOR}
    commands |= {f"{n} --help": [sys.executable, str(ROOT / f"{n}.py"), "--help"] for n in names or steps()}
    commands |= {f"workbook {c} --help": [sys.executable, "-m", "workbook", c, "--help"] for c in CLI_HELP}
    return against_floor(commands, reps)


def against_floor(commands: dict[str, list[str]], reps: int) -> dict:
    """Run `commands` (one named "floor") in interleaved rounds: the best CPU and the median wall of
    each, and their ratios to the floor's."""
    raw = interleaved(commands, reps, offline_env())
    floor_wall, floor_cpu = median(raw["floor"]["wall"]), min(raw["floor"]["cpu"])
    out = {}
    for name, r in raw.items():
        wall, cpu = median(r["wall"]), min(r["cpu"])  # CPU: the best run, which others' work inflated least
        out[name] = {
            "wall": wall,
            "cpu": cpu,
            "ratio": wall / floor_wall,
            "cpu_ratio": cpu / floor_cpu,
            "error": f"exit {r['rc']}: {r['error']}" if r["rc"] else "",
            "command": shown(commands[name]),
        }
    return out


def shown(argv: list[str]) -> str:
    """A command as a reader would type it: `python`, paths relative to the repo, code quoted."""
    words = ["python"] + [os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a for a in argv[1:]]
    return " ".join(f'"{w}"' if " " in w else w for w in words)


def breakdown(step: str, reps: int = 1, what_if: str | None = None) -> dict:
    """Where one replay's time goes, in ms per category (median over `reps` fresh child processes)."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:  # the replays' workspace copies go here
        for _ in range(reps):
            done = subprocess.run(
                [sys.executable, "-m", "bench.replay_cost", step, *([what_if] if what_if else [])],
                cwd=ROOT,
                env=offline_env(TMPDIR=tmp),
                capture_output=True,
                text=True,
            )
            if done.returncode:
                return {"error": last_line(done.stderr) or f"exit {done.returncode}"}
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    keys = dict.fromkeys(k for r in runs for k in r)  # a category a run never entered counts 0 there
    return {key: median([r.get(key, 0.0) for r in runs]) for key in keys}


# -- the child: one replay, timed by category ----------------------------------------------------------


def child(step: str, what_if: str | None = None) -> dict:
    """Import the way the script does, then run its main() with the categories timed (ms)."""
    import importlib

    ms = {}
    start = time.perf_counter()
    import anthropic  # noqa: F401

    ms["import anthropic"] = time.perf_counter() - start
    mark = time.perf_counter()
    for name in RICH_MODULES:
        importlib.import_module(name)
    ms["import rich"] = time.perf_counter() - mark
    mark = time.perf_counter()
    import workbook.launch  # noqa: F401

    ms["import workbook"] = time.perf_counter() - mark
    mark = time.perf_counter()
    module = importlib.import_module(step)
    ms["import script (other)"] = time.perf_counter() - mark
    from bench.whatif import applied

    real_stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
    try:
        with applied(what_if), timing(module) as clock:
            mark = time.perf_counter()
            clock.wrap("other", module.main)([])
            ms["main"] = time.perf_counter() - mark
    finally:
        sys.stdout.close()
        sys.stdout = real_stdout
    for category, seconds in clock.totals.items():
        ms[category] = seconds
    return {k: round(v * 1000, 2) for k, v in ms.items()}


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], *sys.argv[2:3])))
