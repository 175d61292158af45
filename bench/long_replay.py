"""A 1,000-turn s06 replay against the bare replay loop: CPU per extra turn, and the replay's peak memory.

Two recordings of s06's own loop against a scripted model (workbook/scripted_run.py: a bash call a turn,
`true N`), of SHORT and of TURNS turns, each made in a process of its own and stored as a fixture is.
Then, round after round, side by side (started together, one per core):

    python s06_recovery.py --replay F.json --permission all LIMITS   the replay (its commands run)
    python bench/bare_replay.py F.json                               the bare loop on the same recording

Costs are per extra turn, (CPU at TURNS - CPU at SHORT) / (TURNS - SHORT), so start-up and imports
cancel out. The figure is the median over the rounds of the replay's cost over the floor's. Goals: at
most GOAL, and a peak (ru_maxrss of the replay at TURNS turns) of at most PEAK_MB.

    python -m bench.long_replay [TURNS [ROUNDS]]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import BARE, ROOT, median, offline_env, side_by_side

GOAL = 1.5
PEAK_MB = 400
SHORT = 100
# The scripted model bills chars/4 of each request: at 1,000 turns s06's default budget would stop it.
LIMITS = ["--max-steps", "100000", "--max-tokens-total", "10000000000", "--max-input-tokens", "10000000000"]
LIMITS += ["--max-cost", "1000000000"]


def make(turns: int, path: Path) -> None:
    """Run s06's loop for `turns` turns against the scripted model and store what it sent as a fixture."""
    from workbook import scripted_run
    from workbook.files import write_json
    from workbook.replay.request_delta import stored_exchanges

    import s06_recovery

    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(turns))
    with tempfile.TemporaryDirectory(prefix="bench-") as workspace:
        scripted_run.run_loop(s06_recovery, model, Path(workspace))
    fixture = {
        "script": "s06_recovery",
        "scenario": f"long_{turns}",
        "description": f"{turns - 1} turns of one bash call, then an answer (bench/long_replay.py).",
        "provenance": "scripted",
        "provenance_note": "made by workbook/scripted_run.py; usage.input_tokens is chars/4 of each request",
        "task": scripted_run.TASK,
        "workspace": "",
        "exchanges": stored_exchanges(model.exchanges),
    }
    write_json(path, fixture)


def commands(path: Path) -> list[list[str]]:
    """s06's replay of the recording at `path`, and the bare loop's."""
    replay = [sys.executable, "s06_recovery.py", "--replay", str(path), "--permission", "all", *LIMITS]
    return [replay, [sys.executable, str(BARE), str(path)]]


def made(turns: int, folder: Path) -> Path:
    path = folder / f"long_{turns}.json"
    argv = [sys.executable, "-m", "bench.long_replay", "make", str(turns), str(path)]
    subprocess.run(argv, cwd=ROOT, env=offline_env(), check=True, capture_output=True)
    return path


def measure(turns: int = 1000, rounds: int = 3, short: int = SHORT) -> dict:
    """Both recordings, then `rounds` rounds of each replay beside its floor."""
    runs = {n: {"replay": [], "floor": []} for n in (short, turns)}
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        env = offline_env(TMPDIR=tmp)
        fixtures = {n: made(n, Path(tmp)) for n in (short, turns)}
        for _ in range(rounds):
            for n, path in fixtures.items():
                replay = [
                    sys.executable,
                    "s06_recovery.py",
                    "--replay",
                    str(path),
                    "--permission",
                    "all",
                    *LIMITS,
                ]
                floor = [sys.executable, str(BARE), str(path)]
                for who, result in zip(("replay", "floor"), side_by_side([replay, floor], env)):
                    if result["rc"]:
                        raise RuntimeError(f"{who} of {n} turns exited {result['rc']}: {result['last']}")
                    runs[n][who].append(result)
    extra = turns - short

    def per_turn(who: str, k: int) -> float:  # CPU ms per extra turn in round k
        return (runs[turns][who][k]["cpu"] - runs[short][who][k]["cpu"]) / extra * 1000

    replay = [per_turn("replay", k) for k in range(rounds)]
    floor = [per_turn("floor", k) for k in range(rounds)]
    return {
        "turns": turns,
        "short": short,
        "replay_ms": median(replay),
        "floor_ms": median(floor),
        "ratio": median(a / b for a, b in zip(replay, floor)),
        "peak_mb": max(r["peak_mb"] for r in runs[turns]["replay"]),
    }


def report(r: dict) -> list[str]:
    return [
        f"s06 replay, {r['short']} -> {r['turns']} turns, CPU per extra turn: "
        f"replay {r['replay_ms']:.2f} ms, bare loop {r['floor_ms']:.2f} ms, "
        f"median of ratios {r['ratio']:.2f}x (goal <= {GOAL}x)",
        f"s06 replay of {r['turns']} turns, peak RSS {r['peak_mb']:.0f} MB (goal <= {PEAK_MB} MB)",
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        make(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        args = [int(a) for a in sys.argv[1:3]]
        print("\n".join(report(measure(*args))))
