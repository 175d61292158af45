"""1. Replay cost: each step's default replay as a whole process, against the loop a reader would write.

For each step, two commands run side by side (started together, one per core), round after round:

    python sNN_x.py                                   the step's default replay (no key)
    python bench/bare_replay.py fixtures/DEFAULT.json  the floor: the SDK over httpx.MockTransport
                                                       answering the same recording, tools run for real

Each is timed by the CPU of its whole process and its children (the tools' subprocesses). The figure is
the median over the rounds of each round's ratio, step over floor. Goal: at most GOAL (1.10x). Run side
by side, a slow spell of this shared machine (one process's CPU moves by 15 % from run to run) falls
on both sides of a round alike; best over best and median over median are given beside it. Neither
side plays a trick (no import hook, no collector switching): both are plain Python processes.

`breakdown(step)` runs the replay once more in a child process (`python -m bench.replay_cost STEP`)
that times in CPU, exclusively (a nested call's time is charged to the inner category, never twice):

    imports:    anthropic / rich / workbook / the script's other imports
    in main():  fixture load (of which: the contract check of every body) / workspace copy /
                replay transport (request parse, API-rule check, diff) / SDK (request building,
                parsing) / tools (the real bash) / rendering (rich) / other (argparse, the loop itself)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, last_line, median, offline_env, side_by_side, steps, timing

GOAL = 1.10  # a step's default replay costs at most 10 % more CPU than the bare loop on the same recording
BARE = ROOT / "bench" / "bare_replay.py"
CPU = time.process_time
RICH_MODULES = ("rich.console", "rich.markup", "rich.table", "rich.status", "rich.live", "rich.spinner")


def default_fixture(step: str) -> str:
    """The fixture `python sNN_x.py` replays with no task: its DEFAULT_FIXTURE, read from the source."""
    found = re.search(r'^DEFAULT_FIXTURE = "([^"]+)"', (ROOT / f"{step}.py").read_text(), re.M)
    if not found:
        raise ValueError(f"{step}.py names no DEFAULT_FIXTURE")
    return found.group(1)


def commands(names: list[str] | None = None) -> dict[str, list[str]]:
    """Each step and its floor, side by side: "sNN_x" and "sNN_x floor"."""
    out = {}
    for name in names or steps():
        out[name] = [sys.executable, str(ROOT / f"{name}.py")]
        out[f"{name} floor"] = [sys.executable, str(BARE), default_fixture(name)]
    return out


def measure(reps: int = 9, names: list[str] | None = None, other: str | None = None) -> dict:
    """Each step's replay against its bare loop, side by side: in each round the step and its floor start
    together, one per core (common.side_by_side), and the round's ratio is the step's CPU over the floor's.
    The figure ("ratio") is the median of the rounds' ratios; best over best and median over median are
    given beside it. With `other` (another checkout's root), that checkout's step runs in the same rounds,
    beside a floor of its own: its figures under "other"."""
    names = names or steps()
    argvs = commands(names)
    pairs = {name: [(name, f"{name} floor")] for name in names}
    if other:
        for name in names:
            argvs[f"{name} other"] = [sys.executable, os.path.join(other, f"{name}.py")]
            argvs[f"{name} other floor"] = argvs[f"{name} floor"]
            pairs[name].append((f"{name} other", f"{name} other floor"))
    runs = {key: [] for key in argvs}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:  # the replays' workspace copies go here
        env = offline_env(TMPDIR=tmp)
        for round_ in range(reps):
            for name in names:
                for subject, floor in pairs[name]:
                    order = [subject, floor] if round_ % 2 == 0 else [floor, subject]  # who starts first
                    for key, result in zip(order, side_by_side([argvs[k] for k in order], env)):
                        runs[key].append(result)
    out = {}
    for name in names:
        out[name] = compared(runs[name], runs[f"{name} floor"]) | {
            "command": shown(argvs[name]),
            "floor_command": shown(argvs[f"{name} floor"]),
        }
        if other:
            out[name]["other"] = compared(runs[f"{name} other"], runs[f"{name} other floor"])
    return out


def compared(subject: list[dict], floor: list[dict]) -> dict:
    """A subject's runs against the floor's beside them, round by round: CPU best and median of each,
    and three ratios. "ratio", the figure, is the median of the rounds' own ratios."""
    cpu, floor_cpu = [r["cpu"] for r in subject], [r["cpu"] for r in floor]
    failed = [(what, r) for what, runs in (("step", subject), ("floor", floor)) for r in runs if r["rc"]]
    return {
        "cpu": min(cpu),
        "cpu_median": median(cpu),
        "floor_cpu": min(floor_cpu),
        "floor_cpu_median": median(floor_cpu),
        "ratio": median([a / b for a, b in zip(cpu, floor_cpu)]),
        "ratio_best": min(cpu) / min(floor_cpu),
        "ratio_median": median(cpu) / median(floor_cpu),
        "wall": median([r["wall"] for r in subject]),
        "floor_wall": median([r["wall"] for r in floor]),
        "error": "; ".join(f"{what}: exit {r['rc']}: {r['last']}" for what, r in failed[:1]),
    }


def shown(argv: list[str]) -> str:
    """A command as a reader would type it: `python`, paths relative to the repo, code quoted."""
    words = ["python"] + [os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a for a in argv[1:]]
    return " ".join(f'"{w}"' if " " in w else w for w in words)


def breakdown(step: str, reps: int = 1) -> dict:
    """Where one replay's time goes, in ms per category (median over `reps` fresh child processes)."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:  # the replays' workspace copies go here
        for _ in range(reps):
            done = subprocess.run(
                [sys.executable, "-m", "bench.replay_cost", step],
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


def child(step: str) -> dict:
    """Import the way the script does, then run its main() with the categories timed (ms of this process's
    CPU: steadier than wall time on a shared machine; the tools' own processes are not in it)."""
    import importlib

    ms = {}
    start = CPU()
    import anthropic  # noqa: F401

    ms["import anthropic"] = CPU() - start
    mark = CPU()
    for name in RICH_MODULES:
        importlib.import_module(name)
    ms["import rich"] = CPU() - mark
    mark = CPU()
    import workbook.launch  # noqa: F401

    ms["import workbook"] = CPU() - mark
    mark = CPU()
    module = importlib.import_module(step)
    ms["import script (other)"] = CPU() - mark

    real_stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
    try:
        with timing(module, timer=CPU) as clock:
            mark = CPU()
            clock.wrap("other", module.main)([])
            ms["main"] = CPU() - mark
    finally:
        sys.stdout.close()
        sys.stdout = real_stdout
    for category, seconds in clock.totals.items():
        ms[category] = seconds
    return {k: round(v * 1000, 2) for k, v in ms.items()}


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1])))
