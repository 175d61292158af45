"""A step's replay against the bare replay loop: the floor replays the same recording, side by side."""

import subprocess
import sys

from bench import common, replay_cost


def test_each_step_is_set_beside_the_bare_loop_on_its_own_default_fixture():
    step, floor = replay_cost.commands("s06_recovery")
    assert common.shown(step) == "python s06_recovery.py"
    assert common.shown(floor) == f"python bench/bare_replay.py {common.default_fixture('s06_recovery')}"


def test_rounds_alternate_who_starts_first_and_pair_each_step_with_its_floor(monkeypatch):
    started = []

    def side_by_side(argvs, env):
        started.append(["floor" if "bare_replay" in " ".join(a) else "step" for a in argvs])
        return [{"cpu": 1.0 if "bare_replay" in " ".join(a) else 1.2, "peak_mb": 1.0, "rc": 0} for a in argvs]

    monkeypatch.setattr(replay_cost, "side_by_side", side_by_side)
    result = replay_cost.measure(3, ["s01_agent_loop"])["s01_agent_loop"]
    assert started == [["step", "floor"], ["floor", "step"], ["step", "floor"]]
    assert result["ratio"] == 1.2 and result["command"] == "python s01_agent_loop.py"
    assert "1.200x" in replay_cost.report({"s01_agent_loop": result})[1]


def test_the_bare_loop_replays_a_default_fixture_to_its_end_and_removes_its_workspace(tmp_path):
    done = subprocess.run(
        [sys.executable, str(common.BARE), "fixtures/s01_hello_agent.json"],
        cwd=common.ROOT,
        env=common.offline_env(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []
