"""A command's words, when plain: the hardening under s02's allowlist for --permission auto."""

from workbook.shell_words import NotPlain, leaves_workspace, plain_words

import pytest


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("grep -n 'def x' a.py", ["grep", "-n", "def x", "a.py"]),
        ('cat "my notes.txt"', ["cat", "my notes.txt"]),
        ("", []),
    ],
)
def test_a_plain_command_is_split_as_the_shell_splits_it(command, words):
    assert plain_words(command) == words


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("ls; rm -r ../victim", "it uses shell syntax (';')"),
        ("echo $(rm -r x)", "it uses shell syntax ('$ ( )')"),
        ("cat *.txt", "it uses shell syntax ('*')"),
        ("cat a > b", "it uses shell syntax ('>')"),
        ("cat 'notes.txt", "its quotes do not pair up"),
    ],
)
def test_shell_syntax_and_stray_quotes_are_not_plain(command, why):
    with pytest.raises(NotPlain) as caught:
        plain_words(command)
    assert str(caught.value) == why


@pytest.mark.parametrize(
    ("word", "leaves"),
    [
        ("/x", True),
        ("-f/x", True),
        ("--file=/x", True),
        ("a/../../x", True),
        ("..", True),
        ("a/b", False),
        ("-n", False),
        ("x..y", False),
    ],
)
def test_a_word_leaves_the_workspace_when_absolute_or_up_through_dotdot(word, leaves):
    assert leaves_workspace(word) is leaves
