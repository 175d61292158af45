"""A program of its own that saves a file over and over, and waiting until it has saved: the event a
kill -9 test waits for, not a guess of when."""

import subprocess
import sys
import time
from pathlib import Path


def small_program(code: str, *args: str) -> list[str]:
    """The command that runs `code` in a Python of its own."""
    return [sys.executable, "-c", code, *args]


def wait_for_saves(proc: subprocess.Popen, path: Path, saves: int, timeout: float = 120) -> None:
    """Until `path` has been replaced `saves` times (each atomic save renames a new file over it, with a
    new inode), or fail: the event that says the saver is saving again, not a guess of when it is."""
    seen, deadline = path.stat().st_ino, time.monotonic() + timeout  # a safety net only
    while saves:
        assert proc.poll() is None, "the saver ended"
        assert time.monotonic() < deadline, f"{path.name} was not saved {saves} more time(s)"
        inode = path.stat().st_ino
        saves -= inode != seen
        seen = inode
        time.sleep(0.005)
