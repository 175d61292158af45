"""A tool's command: its output read while it runs and kept bounded, and all it started ended with it.

`subprocess.run(capture_output=True)` keeps everything a command prints until it ends: `cat big big big`
(3,000 times a 1 MiB file) then holds gigabytes. Here a thread reads the pipe as the command writes,
keeps the first and the last KEPT_BYTES / 2 bytes, and only counts the rest, so memory stays flat.

A command may leave processes behind: `sleep 313 &`, a `cat` blocked on a FIFO, children that outlive a
timeout, a `setsid` daemon. Group ends them all when the call ends, on success, timeout or Ctrl-C: the
command runs in a process group of its own, and its environment carries a mark (MARK) that whatever it
starts inherits, even in a session of its own. What drops the mark too (`env -i setsid daemon &`) is
re-parented to this process once its shell ends (processes.become_subreaper), and ended as an orphan.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import subprocess
import threading
from contextlib import suppress
from pathlib import Path

from workbook import processes
from workbook.scrub import scrub_secrets, tool_environment

KEPT_BYTES = 32_000  # of a command's output, at most: about three tool results' worth (s02 cuts to 10,000)
DRAIN_WAIT = 2.0  # s: after the command ends, how long a process it left behind may keep the pipe open
# The pipe's buffer, and each read. Linux's default 64 KiB makes a command that prints a lot wait on the
# reader every 64 KiB: 3 GB of `cat` then cost 2.7 s of CPU; with 256 KiB, 2.0 s (the command and the
# reader together). An unprivileged process may ask for up to 1 MiB (/proc/sys/fs/pipe-max-size).
PIPE_BYTES = 256 * 1024
LEADERS: set[int] = set()  # the commands running now: another call's orphans are never one of these
ORPHANS_FOUND_HERE = processes.become_subreaper()  # once, on import: orphans come to this process


class Output:
    """One pipe for stdout and stderr (in the order they were written), read as the command runs.

    with Output() as output:
        process = subprocess.Popen(..., stdout=output.pipe, stderr=output.pipe)
        output.started()        # the parent's copy of the pipe closes: EOF comes when the command's does
        process.wait(timeout)
    output.text()               # head, "[N bytes cut from the middle]", tail
    """

    def __init__(self, limit: int = KEPT_BYTES):
        self.half, self.head, self.tail, self.cut = limit // 2, bytearray(), bytearray(), 0
        self.lock = threading.Lock()
        read_end, self.pipe = os.pipe()
        with suppress(OSError, AttributeError):  # not Linux, or a lower limit: the default buffer then
            fcntl.fcntl(self.pipe, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self.reader = threading.Thread(target=self._drain, args=(read_end,), daemon=True)
        self.reader.start()

    def _drain(self, read_end: int) -> None:
        with open(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(PIPE_BYTES):
                with self.lock:
                    self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if len(chunk) >= self.half:  # the chunk's own end is the new tail: nothing else to copy
            self.cut += len(self.tail) + len(chunk) - self.half
            self.tail = bytearray(chunk[-self.half :])
            return
        self.tail += chunk
        if len(self.tail) > self.half:
            self.cut += len(self.tail) - self.half
            del self.tail[: len(self.tail) - self.half]

    def started(self) -> None:
        """The command has its copy of the pipe: close ours, or the reader would never see the end."""
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None

    def text(self) -> str:
        """What the command printed, its middle cut if it was long, every secret this process holds
        removed (a command that prints /proc/$PPID/environ, in base64 or not, shows the model no key);
        waits a moment for the last bytes."""
        self.started()
        self.reader.join(DRAIN_WAIT)  # a daemon left holding the pipe does not hold the tool up
        with self.lock:
            head, tail, cut = bytes(self.head), bytes(self.tail), self.cut
        if not cut:
            return scrub_secrets((head + tail).decode("utf-8", errors="replace"))
        note = f"\n… [{cut:,} bytes cut from the middle] …\n"
        return scrub_secrets(
            head.decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")
        )

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc) -> None:
        self.started()


MARK = "WORKBOOK_TOOL_CALL"  # in a tool command's environment: which call a process belongs to


class Group:
    """Every process one tool command starts, ended together when the call ends.

    with Output() as output, Group() as group:
        with subprocess.Popen(command, shell=True, start_new_session=True, env=group.environment(), ...) as p:
            group.started(p)
            ...                  # wait; on a timeout, group.end() before reading the output
    # here nothing the command started is running: not `sleep 313 &`, not a `setsid` daemon
    """

    def __init__(self):
        self.mark = secrets.token_hex(8)
        self.leader: subprocess.Popen | None = None
        self.since = float("inf")  # the leader's start time, on the system's clock for processes
        self.ended = False  # end() ran to its close: nothing the command started is left

    def environment(self, base: dict | None = None) -> dict:
        """A tool's environment (scrub.tool_environment, unless `base`), with this call's mark."""
        return (tool_environment() if base is None else base) | {MARK: self.mark}

    def started(self, process: subprocess.Popen) -> None:
        """The command's process, started with start_new_session=True: the leader of its own group."""
        self.leader = process
        LEADERS.add(process.pid)
        self.since = processes.started_at(process.pid)

    def end(self) -> None:
        """Kill the command's whole group, then every process that carries this call's mark (what left
        the group: setsid, a double fork); reap the command. Safe to call more than once.

        A Ctrl-C can land after the command started and before `started` heard of it: then the mark
        alone finds it, the shell and whatever it began."""
        if self.ended:  # the call's own end(), then the with block's: the processes were looked for once
            return
        if self.leader is not None:
            with suppress(ProcessLookupError, PermissionError, AttributeError):
                os.killpg(self.leader.pid, signal.SIGKILL)
        for _ in range(10):  # one may fork while we look: look again until none is left
            marked = self.marked()
            if not marked:
                break
            processes.kill(marked)
        if self.leader is not None and self.leader.poll() is None:
            self.leader.kill()
            self.leader.wait()
        if self.leader is not None:
            LEADERS.discard(self.leader.pid)
        left = processes.orphans(self.since, spared=LEADERS)  # what dropped the mark, re-parented here
        processes.kill(left)
        processes.reap(left)
        self.ended = True

    def marked(self) -> list[int]:
        """The live processes started after the command (a higher pid; any, if it is not known yet)
        whose environment has our mark."""
        return processes.carrying(MARK, self.mark, self.leader.pid if self.leader is not None else 0)

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc) -> None:
        self.end()


def run(command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run(command, shell=True, capture_output=True, timeout=timeout), with four changes:
    - stdout and stderr are one stream, in the order written, read while the command runs, of which
      only the head and the tail are kept (the middle counted): a 3 GB `cat` costs no memory;
    - the command gets a tool's environment (scrub.tool_environment), and what it prints has every
      secret this process holds removed;
    - everything it started ends with the call (Group), whether it returned, timed out or was
      interrupted (Ctrl-C): nothing (`sleep 300 &`, a `setsid` server) outlives it;
    - no stdin: a command that waits for input gets end-of-file at once.
    A timeout raises subprocess.TimeoutExpired, with what the command printed before it as `output`."""
    with Output() as output, Group() as group:
        with subprocess.Popen(
            command,
            shell=True,
            cwd=cwd,
            env=group.environment(),
            stdin=subprocess.DEVNULL,
            stdout=output.pipe,
            stderr=output.pipe,
            start_new_session=True,
        ) as process:
            group.started(process)
            output.started()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                group.end()  # before the output is read: what it left behind would hold the pipe open
                raise subprocess.TimeoutExpired(command, timeout, output=output.text()) from None
            group.end()  # whatever it left running in the background, and on a Ctrl-C (Group's exit)
        return subprocess.CompletedProcess(command, process.returncode, stdout=output.text())
