"""A step's default replay against the loop a reader would write, on the same recording.

For each step, two commands run side by side (started together, one per core), round after round:

    python sNN_x.py                                    the step's default replay (no key)
    python bench/bare_replay.py fixtures/DEFAULT.json  the SDK over httpx.MockTransport answering the
                                                       same recording, tools run for real

Each is timed by the CPU of its whole process and the children it waited for (the tools). The figure is
the median over the rounds of each round's ratio, step over floor. Goal: at most GOAL.

    python -m bench.replay_cost [ROUNDS [STEP ...]]
"""

from __future__ import annotations

import sys
import tempfile

from workbook import paths

from bench.common import BARE, default_fixture, offline_env, paired, shown, side_by_side, steps

GOAL = 1.25  # a step's default replay costs at most 25 % more CPU than the bare loop on its recording


def commands(name: str) -> tuple[list[str], list[str]]:
    """The step's replay and its floor."""
    return paths.step_argv(name), [sys.executable, str(BARE), default_fixture(name)]


def measure(rounds: int = 7, names: list[str] | None = None) -> dict:
    """Each step's replay against its bare loop, side by side, `rounds` times; who starts first alternates."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:  # the replays' workspace copies go here
        env = offline_env(TMPDIR=tmp)
        for name in names or steps():
            step, floor = commands(name)
            runs = {"step": [], "floor": []}
            for n in range(rounds):
                order = ["step", "floor"] if n % 2 == 0 else ["floor", "step"]
                argvs = {"step": step, "floor": floor}
                for who, result in zip(order, side_by_side([argvs[who] for who in order], env)):
                    runs[who].append(result)
            out[name] = paired(runs["step"], runs["floor"]) | {"command": shown(step), "floor": shown(floor)}
    return out


def report(results: dict) -> list[str]:
    lines = [f"step             step CPU  bare loop CPU  median of ratios (goal <= {GOAL:.2f})"]
    for name, r in results.items():
        lines.append(
            f"{name:<16} {r['cpu'] * 1000:>6.0f} ms  {r['floor_cpu'] * 1000:>10.0f} ms  {r['ratio']:>8.3f}x"
            + (f"  {r['error']}" if r["error"] else "")
        )
    return lines


if __name__ == "__main__":
    args = sys.argv[1:]
    print("\n".join(report(measure(int(args[0]) if args else 7, args[1:] or None))))
