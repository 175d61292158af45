"""workbook/shell.py: a command read as the shell will, against a list of programs."""

from workbook import shell

import pytest

PROGRAMS = {"cat", "ls"}


@pytest.mark.parametrize("command", ["cat notes.txt", "ls -la src", "cat 'a file.txt'"])
def test_a_listed_program_on_workspace_paths_is_only_that(command):
    assert shell.not_only(command, PROGRAMS) is None


@pytest.mark.parametrize(
    "command, why",
    [
        ("cat a; rm b", "shell syntax"),
        ("cat a > b", "shell syntax"),
        ("cat *.py", "shell syntax"),
        ("rm -rf build", "'rm' is not a read-only command"),
        ("cat /etc/passwd", "'/etc/passwd' leaves the workspace"),
        ("cat --file=/etc/passwd", "leaves the workspace"),
        ("cat a/../../x", "leaves the workspace"),
        ("cat 'a", "quotes do not pair up"),
        ("", "an empty command"),
    ],
)
def test_anything_more_says_why(command, why):
    assert why in shell.not_only(command, PROGRAMS)
