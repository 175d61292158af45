"""`python -m workbook stepdiff`: how agent_loop changed from step to step, and each step's size."""

from conftest import STEPS, run_script

from workbook import stepdiff


def test_one_step_shows_how_its_loop_changed_from_the_step_before():
    done = run_script("-m", "workbook", "stepdiff", "s02")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["--- s01_agent_loop.agent_loop", "+++ s02_tools.agent_loop"]
    assert "-                output = run_tool(block, workspace)" in lines  # s01's one tool ...
    assert any(line.startswith("+") and "execute(block" in line for line in lines)  # ... is s02's execute()
    assert not any(line.startswith(("+def ", "-def ")) and "agent_loop" not in line for line in lines)


def test_one_step_means_the_diff_from_the_step_before():
    assert (
        run_script("-m", "workbook", "stepdiff", "s05").stdout
        == run_script("-m", "workbook", "stepdiff", "s04", "s05").stdout
    )


def test_stat_gives_every_step_its_size_and_its_loops_change():
    done = run_script("-m", "workbook", "stepdiff", "--stat")
    rows = done.stdout.splitlines()
    assert done.returncode == 0 and len(rows) == len(STEPS)
    steps = stepdiff.scripts()
    for row, (name, script) in zip(rows, steps.items()):
        assert row.startswith(f"{name}  {script.name}: {len(script.read_text().splitlines())} lines")
        assert f"agent_loop {len(stepdiff.loop_source(script))} lines" in row
    added, removed = stepdiff.stat(steps["s01"], steps["s02"])
    assert added > removed > 0 and f"loop +{added} -{removed} from s01" in rows[1]
    assert stepdiff.stat(steps["s03"], steps["s03"]) == (0, 0)


def test_an_unknown_step_is_one_line_of_usage():
    done = run_script("-m", "workbook", "stepdiff", "s01", "s99")
    assert done.returncode == 2 and len(done.stdout.splitlines()) == 1
    assert "the steps here: s01, s02" in done.stdout and "Traceback" not in done.stderr
