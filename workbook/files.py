"""Reading and writing files: only what the user named, whole or not at all."""

from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
from pathlib import Path

from workbook.api import json_text
from workbook.errors import WorkbookError, one_line
from workbook.scrub import dumps

MAX_JSON_BYTES = (
    64 * 1024 * 1024
)  # the largest fixture is under 100 KB; a 2 GB file is a mistake or an attack


MAX_JSON_DEPTH = json_text.MAX_DEPTH  # a real fixture nests about 10 deep; far deeper only exhausts the stack


def read_json(path: str | Path, what: str = "fixture", hint: str = "fix the file or re-record it"):
    """A JSON file that the user named, parsed; any problem is one WorkbookError line naming the file.

    Only a regular file is opened (a folder, a FIFO or a device is refused before any read), and only
    up to MAX_JSON_BYTES. NaN and Infinity are not JSON and are refused, and so is nesting past
    MAX_JSON_DEPTH, so that nothing later can hit a RecursionError on it.
    """
    return parse_json(path, read_bytes(path, what), what, hint)


def read_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a regular file the user named, at most MAX_JSON_BYTES; else one WorkbookError line."""
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if what == "fixture":
            raise WorkbookError(
                f"{path}: no such fixture — see `ls fixtures/` for the ones that exist"
            ) from None
        raise WorkbookError(f"{path}: no such file — check the path to the {what}") from None
    except IsADirectoryError:
        raise WorkbookError(f"{path}: is a folder, not a {what} file — name the .json file inside") from None
    except (OSError, ValueError) as err:  # permission denied, a name with a NUL byte, ...
        raise WorkbookError(f"{path}: cannot open this {what} ({one_line(err)})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise WorkbookError(f"{path}: is a folder, not a {what} file — name the .json file inside")
        if not stat.S_ISREG(info.st_mode):
            raise WorkbookError(f"{path}: not a regular file (a pipe or a device?) — give a {what} file")
        if info.st_size > MAX_JSON_BYTES:
            raise WorkbookError(f"{path}: {info.st_size:,} bytes is too large for a {what} (limit 64 MB)")
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(MAX_JSON_BYTES + 1)
    except OSError as err:
        raise WorkbookError(f"{path}: cannot read this {what} ({one_line(err)})") from None
    finally:
        os.close(fd)


def parse_json(path, raw: bytes, what: str, hint: str):
    """`raw` as JSON the API would take (workbook/api/json_text.py: no NaN, no lone surrogate, its
    nesting and its count of objects bounded before it is parsed); else one WorkbookError line."""
    try:
        return json_text.loads(raw)
    except json_text.JsonRefused as err:
        if str(err).startswith("nested"):
            raise WorkbookError(f"{path}: {err} — not a {what}; {hint}") from None
        kind = "a JSON fixture" if what == "fixture" else f"a {what} (not JSON)"
        raise WorkbookError(f"{path}: not {kind}: {err} — {hint}") from None


text_depth = json_text.text_depth  # how deeply a JSON text nests, read from its bytes


def json_depth(value) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar is 0); no recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once, at import: os.umask can only be read by setting it


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write a whole file or nothing: a temp file in the same folder, fsync, then rename over `path`.

    A crash or `kill -9` at any moment leaves either the old file or the new one, never a torn or
    empty one: at worst a stray `.NAME.*.tmp` beside it, which the next write to that name sweeps (a
    temp file is locked while it is written, so only a dead writer's is taken). Only a regular file is
    replaced, never a device node or a FIFO. Its folder is created if missing: the flags a reader gives
    (--save, --trace, --record) are checked before the run instead (step_cli.refuse_unwritable_flags).
    """
    path = Path(path)
    if not path.parent.is_dir() and not os.path.lexists(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    refuse_unwritable(path, "write")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        mode = stat.S_IMODE(path.stat().st_mode)  # an existing file keeps its permissions
    except OSError:
        mode = 0o666 & ~UMASK  # a new one gets what open() would have given it
    sweep_temp_files(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)  # held until closed: a sweep leaves a live save alone
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
            os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)  # the rename itself survives a power cut only once its folder is synced
    return path


def sweep_temp_files(path: Path) -> None:
    """Remove the `.NAME.*.tmp` a killed save of `path` left: those no live writer holds locked."""
    for temp in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        try:
            with open(temp, "rb") as file:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                temp.unlink()
        except OSError:  # locked by a save in progress, or gone already
            continue


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def refuse_unwritable(path: Path, flag: str) -> None:
    """One WorkbookError line if `path` is no place to write a file: a folder, a device node or a FIFO
    (which a save would replace, or block on), a file in a folder that does not exist (never created),
    or a place this process cannot write (a read-only folder, /proc)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:  # a name too long, a loop of symlinks, a path through a file
        raise WorkbookError(f"{flag} {path}: cannot write there ({one_line(err)})") from None
    if info and stat.S_ISDIR(info.st_mode):
        raise WorkbookError(f"{flag} {path}: is a folder — give a file name to write to")
    if info and not stat.S_ISREG(info.st_mode):
        raise WorkbookError(f"{flag} {path}: not a regular file (a device or a pipe) — give a file to write")
    folder = path.parent
    if not folder.is_dir():
        raise WorkbookError(f"{flag} {path}: no folder {folder} — create it first, or name a file in one")
    if not os.access(folder, os.W_OK) or (info and not os.access(path, os.W_OK)) or _pseudo(folder):
        raise WorkbookError(
            f"{flag} {path}: this process cannot write there — name a file in a folder of yours"
        )


def _pseudo(folder: Path) -> bool:
    """A kernel's file system (/proc, /sys): its files look regular, but writing them fails or does harm."""
    try:
        return os.statvfs(folder).f_blocks == 0
    except OSError:
        return True


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: str | Path, value) -> Path:
    """`value` as indented JSON, its secrets scrubbed (split ones too), written atomically (fixtures,
    saved conversations)."""
    return write_atomic(path, dumps(value, indent=2, ensure_ascii=False) + "\n")
