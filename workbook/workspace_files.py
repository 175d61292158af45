"""Files the tools open in a workspace: regular files only, within a size."""

from __future__ import annotations

import errno
import os
import stat
from itertools import islice
from pathlib import Path

from workbook.scrub import scrub_secrets


def resolved(path: Path) -> Path:
    """`path` with every link followed. A link loop is the OSError the system names (ELOOP), one line
    for an is_error result, not the RuntimeError pathlib raises (Python 3.11, 3.12)."""
    try:
        return path.resolve()
    except RuntimeError:
        loop = "a symbolic link loop (a link that leads back to itself)"
        raise OSError(errno.ELOOP, loop, str(path)) from None


def regular_file(target: Path, name: str, max_bytes: float = float("inf")):
    """`target` opened to read if it is a regular file (a FIFO would hang the run, a device never ends)
    of at most `max_bytes`; else an error naming it as the model did (`name`): an is_error result."""
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and fstat refuses it
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", name)
        regular = stat.S_ISREG(info.st_mode)
        raise ValueError(f"{name}: " + (f"over {max_bytes:,.0f} bytes" if regular else "not a regular file"))
    return os.fdopen(fd, "rb")


def read_text(target: Path, name: str, budget: int) -> str:
    """A regular file's text, reading at most `budget` bytes: all of it, or its head and tail; every
    secret this process holds removed (a workspace's .env may hold the very key the loop runs on)."""
    with regular_file(target, name) as file:
        size = os.fstat(file.fileno()).st_size
        if size <= budget:
            text = file.read().decode(errors="replace")  # as read_text() would: newlines made \n
            return scrub_secrets(text.replace("\r\n", "\n").replace("\r", "\n"))
        head, _, tail = file.read(budget // 2), file.seek(size - budget // 2), file.read(budget // 2)
    cut = f"\n… [{size - budget:,} bytes in the middle not read] …\n"
    return scrub_secrets(head.decode(errors="replace") + cut + tail.decode(errors="replace"))


def glob_files(workspace: Path, glob: str, max_paths: int) -> list[Path]:
    """The regular files a glob matches that really are in the workspace (a symlink out is left out),
    sorted. A glob that leaves the workspace, repeats ** (each walks the tree below the last: minutes on
    a deep one), is not one pathlib takes, or matches over `max_paths` paths is a ValueError, one line."""
    if Path(glob).is_absolute() or ".." in Path(glob).parts:
        raise ValueError(f"glob {glob!r} must be relative to the workspace, without ..")
    if Path(glob).parts.count("**") > 1:
        raise ValueError(f"glob {glob!r} repeats **; one ** already reaches every depth: narrow it to one")
    try:  # pathlib rejects some patterns ("", ".", "a**") with assorted exceptions
        found = list(islice(workspace.glob(glob), max_paths + 1))
    except (ValueError, IndexError, AttributeError, NotImplementedError):
        raise ValueError(f"glob {glob!r} is not a pattern pathlib accepts; try **/* or *.py") from None
    if len(found) > max_paths:
        raise ValueError(f"glob {glob!r} matches over {max_paths:,} paths; narrow it")
    return sorted(p for p in found if p.is_file() and p.resolve().is_relative_to(workspace))
