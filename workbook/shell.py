"""Reading a shell command as the shell will: whether it only names a program from a list, with no shell
syntax and no path out of the workspace (s02's `--permission auto` runs those unasked).

An allowlist, not a denylist: the denylist it replaced let `rm --recursive --force ../dir` and
`find . -delete` pass. shlex splits the words as the shell will, quotes removed.
"""

from __future__ import annotations

import re
import shlex

SHELL_SYNTAX = set(";&|<>()$`\\\n\r*?[]{}~!#")  # chaining, redirection, substitution, globs, comments


def not_only(command: str, programs: set[str]) -> str | None:
    """Why `command` is more than one of `programs` run on paths in the workspace, or None."""
    syntax = sorted(set(command) & SHELL_SYNTAX)
    if syntax:
        return f"it uses shell syntax ({' '.join(syntax)!r})"
    try:
        words = shlex.split(command)
    except ValueError:
        return "its quotes do not pair up"
    if not words or words[0] not in programs:
        return f"{words[0] if words else 'an empty command'!r} is not a read-only command auto knows"
    outside = [word for word in words[1:] if leaves_workspace(word)]
    return f"{outside[0]!r} leaves the workspace" if outside else None


def leaves_workspace(word: str) -> bool:
    """Whether a command's word is a path out of the workspace: absolute (/x, -f/x, --file=/x), or up
    through .. (a/../../x)."""
    absolute = word.startswith("/") or (word.startswith("-") and "/" in word) or "=/" in word
    return absolute or ".." in re.split("[=/]", word)
