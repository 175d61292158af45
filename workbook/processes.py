"""Processes, found and ended through psutil: the one place that looks at what is running.

A tool call ends everything its command started (workbook/capture.py), the grader's keeper everything
below it and what it uses (workbook/classroom/keeper.py), the grader whatever is left of a run's
session (workbook/classroom/sandbox.py), and the tests look for what a program left behind.

    kill(below(pid))                 every process below pid, at any depth, killed
    kill(carrying("MARK", value))    every process whose environment holds MARK=value

Every function takes processes that end while it looks as gone, not as errors.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable

import psutil

GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphans below this process are re-parented to it, not to init


def become_subreaper() -> bool:
    """Make this process the one that a command's orphans are re-parented to (Linux 3.4 on): a `setsid`
    daemon that dropped every mark, whatever its environment or dumpable flag, then stays one of our
    children, where `orphans()` finds it. False where the system does not offer it."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def started_at(pid: int) -> float:
    """When a process started, on the clock psutil keeps for processes (inf if it has ended)."""
    try:
        return psutil.Process(pid).create_time()
    except GONE:
        return float("inf")


def orphans(since: float, spared: Iterable[int] = ()) -> list[psutil.Process]:
    """This process's children started at `since` (started_at's clock) or later, but those in `spared`:
    what a command left behind and the system re-parented here (become_subreaper)."""
    found = []
    for child in children(os.getpid()):
        try:
            if child.pid not in set(spared) and child.create_time() >= since:
                found.append(child)
        except GONE:
            continue
    return found


def reap(processes: Iterable[psutil.Process], timeout: float = 5.0) -> None:
    """Wait for killed children of ours to end, so that none is left as a zombie."""
    psutil.wait_procs(list(processes), timeout=timeout)


def below(pid: int) -> list[psutil.Process]:
    """Every live process below `pid`, at any depth (none if `pid` has ended)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except GONE:
        return []


def children(pid: int) -> list[psutil.Process]:
    """The live processes whose parent is `pid`."""
    try:
        return psutil.Process(pid).children()
    except GONE:
        return []


def command_line(process: psutil.Process) -> str:
    """A process's command line, its words joined by spaces ("" once it has ended)."""
    try:
        return " ".join(process.cmdline())
    except GONE:
        return ""


def kill(processes: Iterable[psutil.Process | int]) -> None:
    """SIGKILL each process (a Process or a pid); one that has ended, or is not ours, is passed over."""
    for process in processes:
        try:
            os.kill(process if isinstance(process, int) else process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def carrying(name: str, value: str, after: int = 0) -> list[int]:
    """The live processes started after pid `after` (a higher pid) whose environment has name=value:
    what a command started that left its process group (setsid, a double fork) still carries it."""
    found = []
    for process in psutil.process_iter():
        if process.pid <= after:
            continue
        try:
            if process.environ().get(name) == value:
                found.append(process.pid)
        except GONE:
            continue
    return found


def in_session(sid: int) -> list[int]:
    """The processes whose session id is `sid`."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid:
                found.append(pid)
        except OSError:
            continue
    return found


def threads_of_user(uid: int) -> int:
    """How many processes and threads the user `uid` runs now (what RLIMIT_NPROC counts)."""
    count = 0
    for process in psutil.process_iter():
        try:
            if process.uids().real == uid:
                count += process.num_threads()
        except GONE:
            continue
    return count


def resident(processes: Iterable[psutil.Process]) -> int:
    """The processes' resident memory together, in bytes (one that has ended counts nothing)."""
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except GONE:
            continue
    return total


SHARED = ("/memfd:", "/dev/shm/")  # what an open file descriptor's link names when it is memory


def shared_memory(processes: Iterable[psutil.Process]) -> int:
    """Bytes held in memfds and /dev/shm files the processes keep open, each file counted once: memory
    no rlimit and no resident count sees until it is mapped. Blocks, not sizes: a file made large and
    never written holds nothing. (psutil's open_files lists regular files only, never a memfd: each
    descriptor's link is read here.)"""
    held: dict[tuple[int, int], int] = {}
    for process in processes:
        folder = f"/proc/{process.pid}/fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue  # ended while we looked
        for fd in fds:
            link = f"{folder}/{fd}"
            try:
                if os.readlink(link).startswith(SHARED):
                    info = os.stat(link)
                    held[(info.st_dev, info.st_ino)] = info.st_blocks * 512
            except OSError:
                continue
    return sum(held.values())


def running(needle: str) -> list[int]:
    """The live processes (a zombie has ended) whose command line, its words joined by spaces, holds
    `needle`."""
    found = []
    for process in psutil.process_iter():
        try:
            if needle in command_line(process) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except GONE:
            continue
    return found
