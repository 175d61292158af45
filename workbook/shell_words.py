"""A command's words as the shell will see them, when it is plain: the hardening under s02's allowlist
for `--permission auto`, which runs a command unasked only when it is one read-only program with plain
words. Without this, `ls; rm -r ../x`, `cat $(rm x)` or `cat /etc/passwd` would pass as a plain `ls`
or `cat`.

    plain_words("grep -n 'def x' a.py")   ['grep', '-n', 'def x', 'a.py']
    plain_words("ls; rm -r ../x")         NotPlain: it uses shell syntax (';')
    leaves_workspace("--file=/etc/x")     True
"""

from __future__ import annotations

import re
import shlex

SHELL_SYNTAX = set(";&|<>()$`\\\n\r*?[]{}~!#")  # chaining, redirection, substitution, globs


class NotPlain(ValueError):
    """Why a command is not plain, in a few words."""


def plain_words(command: str) -> list[str]:
    """The command's words, quotes removed (shlex splits as the shell will); NotPlain when it uses
    shell syntax or its quotes do not pair up. An empty command has no words."""
    syntax = sorted(set(command) & SHELL_SYNTAX)
    if syntax:
        raise NotPlain(f"it uses shell syntax ({' '.join(syntax)!r})")
    try:
        return shlex.split(command)
    except ValueError:
        raise NotPlain("its quotes do not pair up") from None


def leaves_workspace(word: str) -> bool:
    """Whether a command's word is a path out of the workspace: absolute (/x, -f/x, --file=/x), or up
    through .. (a/../../x)."""
    absolute = word.startswith("/") or (word.startswith("-") and "/" in word) or "=/" in word
    return absolute or ".." in re.split("[=/]", word)
