"""What the benchmarks share: commands run side by side, and the pairing of each run with its floor."""

import os
import sys
import tempfile

from bench import common


def test_side_by_side_starts_the_commands_together_and_times_each():
    # Each opens the same FIFO, one to write, one to read: opening one end waits for the other, so this
    # ends only if the two run at the same time (the alarm fails it otherwise, with no sleep to wait).
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        writer = f"import signal; signal.alarm(20); open({fifo!r}, 'w').write('met')"
        reader = f"import signal; signal.alarm(20); print(open({fifo!r}).read()); 1/0"
        wrote, read = common.side_by_side(
            [[sys.executable, "-c", writer], [sys.executable, "-c", reader]], common.offline_env()
        )
    assert wrote["rc"] == 0 and read["rc"] == 1 and read["last"] == "ZeroDivisionError: division by zero"
    assert all(r["cpu"] > 0 and r["wall"] >= r["cpu"] / 2 and r["peak_mb"] > 1 for r in (wrote, read))


def run(cpu: float, rc: int = 0) -> dict:
    return {"cpu": cpu, "peak_mb": cpu * 10, "rc": rc, "last": "boom" if rc else ""}


def test_the_figure_is_the_median_of_the_rounds_own_ratios():
    subject = [run(3.0), run(1.0), run(1.0), run(1.0), run(2.0)]
    floor = [run(1.0), run(2.0), run(1.0), run(9.0), run(2.0)]
    result = common.paired(subject, floor)
    assert result["ratio"] == 1.0  # the rounds' ratios: 3, 0.5, 1, 1/9, 1
    assert result["cpu"] == 1.0 and result["floor_cpu"] == 2.0 and result["peak_mb"] == 30.0
    assert result["error"] == ""


def test_a_failed_run_is_named_with_its_exit_code_and_last_line():
    result = common.paired([run(1.0)], [run(1.0, rc=2)])
    assert result["error"] == "floor: exit 2: boom"


def test_a_default_fixture_is_read_from_each_steps_source():
    for step in common.steps():
        assert (common.ROOT / common.default_fixture(step)).is_file()
    assert common.default_fixture("s01_agent_loop") == "fixtures/s01_hello_agent.json"


def test_commands_are_shown_as_a_reader_would_type_them():
    argv = [sys.executable, str(common.BARE), "a b.json"]
    assert common.shown(argv) == 'python bench/bare_replay.py "a b.json"'


def test_the_offline_environment_has_no_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert "ANTHROPIC_API_KEY" not in common.offline_env()
