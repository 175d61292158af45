"""Temp folders: a fresh copy of a fixture's workspace per run, all under one private root, cleaned up."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

from workbook.errors import FixtureError, WorkbookError
from workbook.paths import WORKSPACES
from workbook.replay import trust


def workspace_problem(name) -> str | None:
    """Why `name` is not a folder under fixtures/workspace/ (None when it is, or when it is "")."""
    if not isinstance(name, str):
        return 'must be a string naming a folder under fixtures/workspace/ (or "" for an empty one)'
    if name == "":
        return None
    shown = repr(name[:60]) + ("…" if len(name) > 60 else "")
    if not name.isprintable() or any(len(part.encode("utf-8", "replace")) > 255 for part in Path(name).parts):
        return f"{shown} must be a folder name (printable, each part at most 255 bytes)"
    if name.startswith(("/", "\\", "~")) or ".." in Path(name).parts or ":" in name:
        return f"{shown} must be a folder name under fixtures/workspace/, not a path"
    try:  # the file system has its own limits (a path too long, a name it cannot hold): one line, not a trace
        source = (WORKSPACES / name).resolve()
        if not source.is_relative_to(WORKSPACES.resolve()) or source == WORKSPACES.resolve():
            return f"{shown} must be a folder name under fixtures/workspace/, not a path"
        if not source.is_dir():
            return f"no folder {shown} under fixtures/workspace/"
    except (OSError, ValueError) as err:
        return f"{shown} cannot be a folder here ({type(err).__name__})"
    return None


KEPT_RUNS = 10  # the newest replays' files (audit log, trace, saved conversation) kept; older ones go


def temp_base() -> Path:
    """Where temp folders go: tempfile's choice ($TMPDIR...), unless that came from a relative $TMPDIR,
    TEMP or TMP (relative to whatever folder the reader is in: not a temp folder), then /tmp."""
    if tempfile.tempdir is None and any(
        os.environ.get(name) and not os.path.isabs(os.environ[name]) for name in ("TMPDIR", "TEMP", "TMP")
    ):
        return Path("/tmp")
    return Path(tempfile.gettempdir())


def private_path(path: Path) -> bool:
    """Whether no other user can change what `path` (a folder that exists) holds: every folder from /
    down to it, links resolved, is owned by this user or root and writable by no one else, but for a
    sticky folder (/tmp) whose next folder down is ours. Anything kept or run from below it is ours."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    try:
        resolved = Path(os.path.realpath(path))
        chain = [resolved, *resolved.parents][::-1]  # /, then down to the folder itself
        infos = [os.lstat(folder) for folder in chain]
    except (OSError, ValueError):
        return False
    for n, info in enumerate(infos):
        if info.st_uid not in (uid, 0) or not stat.S_ISDIR(info.st_mode):
            return False
        if info.st_mode & 0o022:
            below = infos[n + 1] if n + 1 < len(infos) else None
            if not (info.st_mode & stat.S_ISVTX and below is not None and below.st_uid in (uid, 0)):
                return False
    return True


def scratch_root() -> Path:
    """$TMPDIR/workbook-<uid>: every temp folder the workbook makes lives here, and only here.

    Private to this user (mode 700, owned, not a symlink, on a path no one else can change: private_path);
    if something else holds the name, this process uses a folder of its own instead, removed when it exits.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = temp_base() / f"workbook-{uid}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:  # ours, and not a symlink planted for us
            if info.st_mode & 0o077:
                root.chmod(0o700)
            if private_path(root):
                return root
    except OSError:
        pass
    global _PRIVATE_ROOT
    if _PRIVATE_ROOT is None:
        sweep_fallbacks(uid)
        base = temp_base() if private_path(temp_base()) else Path("/tmp")
        _PRIVATE_ROOT = Path(tempfile.mkdtemp(prefix=f"workbook-{uid}-{os.getpid()}-", dir=base))
    return _PRIVATE_ROOT


def sweep_fallbacks(uid: int) -> None:
    """Remove the fallback roots (`workbook-<uid>-<pid>-XXXX`) of processes that have ended: a killed
    process never ran its clean-up at exit. Only this user's own folders, never through a symlink."""
    for folder in temp_base().glob(f"workbook-{uid}-*-*"):
        pid = folder.name.split("-")[2]
        try:
            info = folder.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid and pid.isdigit() and not _alive(int(pid)):
            remove_tree(folder)


_PRIVATE_ROOT: Path | None = None


_MADE_HERE: list[Path] = []  # run folders this process made, emptied of workspaces at exit


def new_run_folder() -> Path:
    """A fresh folder for one run (`<pid>-<random>`) under scratch_root(), after sweeping old ones."""
    for _ in range(3):  # another process may remove an empty root between our mkdir and mkdtemp
        root = scratch_root()
        sweep(root)
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        except FileNotFoundError:
            continue
        _MADE_HERE.append(folder)
        return folder
    raise WorkbookError(f"cannot make a temp folder under {temp_base()} — is it writable?")


def sweep(root: Path) -> None:
    """Tidy what ended runs left: their workspace copies go; of their other files, the newest
    KEPT_RUNS runs' stay. Another live process's folders are never touched; this process's own older
    runs go too, beyond the newest KEPT_RUNS (a notebook or a test session makes hundreds)."""
    ended = []
    for folder in _entries(root):
        pid = folder.name.partition("-")[0]
        if folder.is_symlink() or not folder.is_dir() or not pid.isdigit():
            continue
        if int(pid) == os.getpid():  # a long-lived process's own runs: only the newest are kept
            ended.append(folder)
            continue
        if _alive(int(pid)):
            continue
        release(folder)
        if folder.exists():
            ended.append(folder)
    ended.sort(key=_mtime, reverse=True)
    for folder in ended[KEPT_RUNS:]:
        remove_tree(folder)


def release(folder: Path) -> None:
    """A run is over: remove its workspace copy, and the run folder too if nothing else is in it."""
    remove_tree(folder / "workspace")
    try:
        folder.rmdir()  # only if empty: an audit log or a saved conversation keeps it
    except OSError:
        pass


def _release_all_at_exit() -> None:
    for folder in _MADE_HERE:
        release(folder)
    for root in {folder.parent for folder in _MADE_HERE}:
        try:
            root.rmdir()  # only if nothing is left in it at all
        except OSError:
            pass


atexit.register(_release_all_at_exit)


def _entries(root: Path) -> list[Path]:
    try:
        return list(root.iterdir())
    except OSError:
        return []


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but is not ours
        return True
    return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def remove_tree(path: Path) -> None:
    """Remove a folder a run made, even where a tool left it read-only; never follows symlinks."""

    def writable_then_retry(function, name, _):
        try:
            os.chmod(os.path.dirname(name), 0o700)
            function(name)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=writable_then_retry)


def copy_workspace(name: str) -> Path:
    """A fresh temp copy of fixtures/workspace/<name>: replayed tools never touch the reader's files.

    It lives in a run folder under scratch_root(), removed when the run ends (Run.finish), when this
    process exits, or by the next run's sweep if this one was killed.
    """
    problem = workspace_problem(name)
    if problem:
        raise FixtureError(f"workspace: {problem}")
    target = new_run_folder() / "workspace"
    if name:
        shutil.copytree(WORKSPACES / name, target, symlinks=True)
    else:
        target.mkdir()
    trust.fresh_copy(target, name)  # known as made here: a trusted replay may run its commands in it
    return target
