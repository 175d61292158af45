"""s02's allowlist for --permission auto: a command runs unasked only when each word is known to read."""

import pytest

from s02_tools import not_read_only


@pytest.mark.parametrize(
    "command", ["cat notes.txt", "ls -la src", "grep -n 'def x' a.py", "wc -l a b", "true"]
)
def test_plain_reads_in_the_workspace_pass(command):
    assert not_read_only(command) is None


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("ls; rm -r ../victim", "shell syntax"),
        ("echo $(rm -r x)", "shell syntax"),
        ("cat *.txt", "shell syntax"),
        ("cat 'notes.txt", "quotes do not pair up"),
        ("", "an empty command"),
        ("find . -delete", "'find' is not a read-only command"),
        ("python3 -c 'import shutil'", "'python3' is not a read-only command"),
        ("cat /etc/hostname", "'/etc/hostname' leaves the workspace"),
        ("cat a/../../x", "'a/../../x' leaves the workspace"),
        ("grep --file=/etc/passwd x", "leaves the workspace"),
    ],
)
def test_anything_else_is_refused_with_the_reason(command, why):
    assert why in not_read_only(command)
