"""The processes a test's program started, found through Linux's /proc: what the Ctrl-C tests wait on
(the command under the step running) and check after (nothing of it left)."""

import os
from pathlib import Path

# Linux lists each thread's children in /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN, on in the
# usual kernels): a few small reads, where scanning every process on the machine is some hundreds, every
# 20 ms, from five runs at once. Without it, the scan.
PROC_CHILDREN = Path(f"/proc/self/task/{os.getpid()}/children").exists()


def children_of(pid: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of each process whose parent is `pid` (Linux /proc)."""
    if PROC_CHILDREN:
        found = []
        for listed in Path(f"/proc/{pid}/task").glob("*/children"):  # the tools run in threads (s04 on)
            try:
                kids = listed.read_text().split()
            except OSError:
                continue  # the thread, or the process, ended while we looked
            for kid in kids:
                try:
                    found.append((int(kid), Path(f"/proc/{kid}/cmdline").read_bytes()))
                except OSError:
                    continue
        return found
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat, command = (entry / "stat").read_text(), (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue  # not a process, or one that ended while we looked
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append((int(entry.name), command))
    return found


def descendants(pid: int) -> list[bytes]:
    """The command line (its words joined by spaces) of every process below `pid`, at any depth."""
    found, below = [], [pid]
    while below:
        for child, command in children_of(below.pop()):
            found.append(command.replace(b"\0", b" "))
            below.append(child)
    return found
