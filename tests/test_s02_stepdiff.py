"""stepdiff.py: the diff from one step to the next, and its size for the README's step table."""

from conftest import STEPS, run_script

import stepdiff


def test_the_diff_from_s01_to_s02_shows_what_s02_adds():
    done = run_script("stepdiff.py", "s01", "s02")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["--- s01_agent_loop.py", "+++ s02_tools.py"]
    assert any(line.startswith("+# -- new in s02:") for line in lines)
    assert "-def run_tool(block, workspace: Path) -> str:" in lines
    assert not any(
        line.startswith(("-def run_bash", "+def run_bash", "-def show_", "+def show_")) for line in lines
    )


def test_one_step_means_the_diff_from_the_step_before():
    assert run_script("stepdiff.py", "s02").stdout == run_script("stepdiff.py", "s01", "s02").stdout


def test_stat_lists_each_consecutive_pair_with_counts_that_add_up():
    done = run_script("stepdiff.py", "--stat")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == len(STEPS) - 1
    assert done.stdout.splitlines()[0].startswith(f"s01 -> {STEPS[1][:3]}  +")
    steps = stepdiff.scripts()
    old, new = steps["s01"], steps["s02"]
    added, removed = stepdiff.stat(old, new)
    assert added > removed > 0
    assert added - removed == len(new.read_text().splitlines()) - len(old.read_text().splitlines())
    assert stepdiff.stat(old, old) == (0, 0)


def test_an_unknown_step_is_one_line_of_usage():
    done = run_script("stepdiff.py", "s01", "s99")
    assert done.returncode == 2 and len(done.stdout.splitlines()) == 1
    assert "the steps here: s01, s02" in done.stdout and "Traceback" not in done.stderr
