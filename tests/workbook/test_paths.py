"""workbook/paths.py: where a step's file is, how it is imported and how a reader runs it, for the six at
the root and the later ones in workbook/later/."""

import importlib
import subprocess

from workbook import paths

import pytest


def test_every_step_has_a_file_where_paths_says():
    assert [paths.step_file(step).is_file() for step in paths.STEPS] == [True] * len(paths.STEPS)
    assert {paths.step_file(step).parent for step in paths.SIX} == {paths.ROOT}
    assert {paths.step_file(step).parent for step in paths.STEPS[6:]} == {paths.LATER}


def test_a_steps_module_name_imports_its_file():
    for step in ("s02_tools", "s07_really_done"):
        module = importlib.import_module(paths.step_module(step))
        assert module.__file__ == str(paths.step_file(step))


@pytest.mark.parametrize(
    ("step", "command", "path"),
    [
        ("s06_recovery", "python s06_recovery.py", "s06_recovery.py"),
        ("s07_really_done", "python -m workbook.later.s07_really_done", "workbook/later/s07_really_done.py"),
    ],
)
def test_a_step_is_named_and_run_as_a_reader_would_from_the_root(step, command, path):
    assert paths.step_command(step) == command
    assert paths.step_path(step) == path


def test_step_argv_runs_a_later_step_from_the_root():
    done = subprocess.run(
        [*paths.step_argv("s11_handoff"), "--help"],
        cwd=paths.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "usage:" in done.stdout
