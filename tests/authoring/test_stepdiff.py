"""`python -m workbook stepdiff`: how agent_loop changed from step to step, and each step's size."""

from workbook import cli
from workbook.authoring import stepdiff

from conftest import STEPS, run_script


def stepdiff_says(capsys, *argv) -> tuple[int, list[str]]:
    """The command run in this process, as `python -m workbook stepdiff ARGV` runs it: code, lines."""
    code = cli.main(["stepdiff", *argv])
    return code, capsys.readouterr().out.splitlines()


def test_the_command_line_runs_stepdiff_as_a_reader_types_it():
    done = run_script("-m", "workbook", "stepdiff", "s02")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["--- s01_agent_loop.agent_loop", "+++ s02_tools.agent_loop"]


def test_one_step_shows_how_its_loop_changed_from_the_step_before(capsys):
    code, lines = stepdiff_says(capsys, "s02")
    assert code == 0
    assert lines[:2] == ["--- s01_agent_loop.agent_loop", "+++ s02_tools.agent_loop"]
    assert "-                output = run_tool(block, settings.workspace)" in lines  # s01's one tool ...
    assert any(line.startswith("+") and "= execute(" in line for line in lines)  # ... is s02's execute()
    assert not any(line.startswith(("+def ", "-def ")) and "agent_loop" not in line for line in lines)


def test_one_step_means_the_diff_from_the_step_before(capsys):
    assert stepdiff_says(capsys, "s05") == stepdiff_says(capsys, "s04", "s05")


def test_stat_gives_every_step_its_size_and_its_loops_change(capsys):
    code, rows = stepdiff_says(capsys, "--stat")
    assert code == 0 and len(rows) == len(STEPS)
    steps = stepdiff.scripts()
    for row, (name, script) in zip(rows, steps.items()):
        assert row.startswith(f"{name}  {script.name}: {len(script.read_text().splitlines())} lines")
        assert f"agent_loop {len(stepdiff.loop_source(script))} lines" in row
    added, removed = stepdiff.stat(steps["s01"], steps["s02"])
    assert added > removed > 0 and f"loop +{added} -{removed} from s01" in rows[1]
    assert stepdiff.stat(steps["s03"], steps["s03"]) == (0, 0)


def test_an_unknown_step_is_one_line_of_usage(capsys):
    code, lines = stepdiff_says(capsys, "s01", "s99")
    assert code == 2 and len(lines) == 1
    assert "the steps here: s01, s02" in lines[0]


def test_help_says_what_stepdiff_shows(capsys):
    code, lines = stepdiff_says(capsys, "--help")
    assert code == 0 and any("how agent_loop changed from s04 to s05" in line for line in lines)


def test_no_step_names_a_later_one_after_its_docstring():
    """An earlier step never serves a later one: past its docstring, sNN never mentions a later step."""
    import ast
    import re

    for i, script in enumerate(stepdiff.scripts().values(), 1):
        text = script.read_text()
        docstring_ends = ast.parse(text).body[0].end_lineno
        for n, line in enumerate(text.splitlines()[docstring_ends:], docstring_ends + 1):
            later = [m for m in re.findall(r"\bs0([1-6])\b", line) if int(m) > i]
            assert not later, f"{script.name}:{n} names s0{later[0]}: {line.strip()}"


def test_the_first_step_shows_its_whole_loop_as_new(capsys):
    code, lines = stepdiff_says(capsys, "s01")
    assert code == 0 and lines[0] == "s01 is the first step: its agent_loop, all of it new"
    assert lines[1].startswith("def agent_loop(") and any("messages.append" in line for line in lines)


def test_a_name_the_loop_uses_as_before_but_the_step_defines_anew_is_named(capsys):
    """s03's loop calls execute() as s02's did, and s02's loop passes tools=TOOLS as s01's did, so the
    diff cannot show either change: stepdiff says it, for a function and for a constant alike."""
    code, lines = stepdiff_says(capsys, "s03")
    said = " ".join(lines[lines.index("") + 1 :]) if "" in lines else ""
    assert code == 0 and "s03 defines anew what its loop uses by the same names: execute (s02's)" in said
    code, lines = stepdiff_says(capsys, "s02")  # s02's execute is new: nothing of the same name before it
    assert "s02 defines anew what its loop uses by the same names: TOOLS (s01's)" in lines
    code, lines = stepdiff_says(capsys, "s04")  # s04 defines nothing its loop uses under an older name
    assert "defines anew" not in " ".join(lines)
