"""s02's allowlist for --permission auto: which commands are plain reads it may run unasked.

No denylist names every way to delete (`rm --recursive --force ../dir`, `find . -delete`, a one-line
Python script), so auto runs a command without asking only when it is known to read: a program on a
short list, its words free of shell syntax (chaining, redirection, substitution, globs), and none of
them a path out of the workspace. Everything else goes to a person (s02's gate).

    not_read_only("cat notes.txt")        None: auto may run it
    not_read_only("ls; rm -r ../x")       "it uses shell syntax (';')"
"""

from __future__ import annotations

import re
import shlex

READ_ONLY_COMMANDS = {"cat", "head", "tail", "wc", "ls", "grep", "pwd", "echo", "stat", "du", "diff", "true"}
SHELL_SYNTAX = set(";&|<>()$`\\\n\r*?[]{}~!#")


def not_read_only(command: str) -> str | None:
    """Why auto may not run `command` unasked, or None: an allowlist runs only what it knows."""
    syntax = sorted(set(command) & SHELL_SYNTAX)
    if syntax:
        return f"it uses shell syntax ({' '.join(syntax)!r})"
    try:
        words = shlex.split(command)  # the words as the shell will see them, quotes removed
    except ValueError:
        return "its quotes do not pair up"
    if not words or words[0] not in READ_ONLY_COMMANDS:
        return f"{words[0] if words else 'an empty command'!r} is not a read-only command auto knows"
    outside = [word for word in words[1:] if leaves_workspace(word)]
    return f"{outside[0]!r} leaves the workspace" if outside else None


def leaves_workspace(word: str) -> bool:
    """Whether a command's word is a path out of the workspace: absolute (/x, -f/x, --file=/x), or up
    through .. (a/../../x)."""
    absolute = word.startswith("/") or (word.startswith("-") and "/" in word) or "=/" in word
    return absolute or ".." in re.split("[=/]", word)
