"""Running a tool's shell command, bounded: `run` is subprocess.run with a cap on what it keeps and a
process group that ends with the call.

`subprocess.run(capture_output=True)` keeps everything a command prints until it ends: `cat big big big`
(3,000 times a 1 MiB file) then holds gigabytes. Here a thread reads the pipe as the command writes,
keeps the first and the last KEPT_BYTES / 2 bytes, and only counts the rest, so memory stays flat.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
from contextlib import suppress
from pathlib import Path

KEPT_BYTES = 32_000  # of a command's output, at most: about three tool results' worth (s02 cuts to 10,000)
DRAIN_WAIT = 2.0  # s: after the command ends, how long a process it left behind may keep the pipe open
# The pipe's buffer, and each read. Linux's default 64 KiB makes a command that prints a lot wait on the
# reader every 64 KiB: 3 GB of `cat` then cost 2.7 s of CPU; with 256 KiB, 2.0 s (the command and the
# reader together). An unprivileged process may ask for up to 1 MiB (/proc/sys/fs/pipe-max-size).
PIPE_BYTES = 256 * 1024


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
        """What the command printed, its middle cut if it was long; waits a moment for the last bytes."""
        self.started()
        self.reader.join(DRAIN_WAIT)  # a daemon left holding the pipe does not hold the tool up
        with self.lock:
            head, tail, cut = bytes(self.head), bytes(self.tail), self.cut
        if not cut:
            return (head + tail).decode("utf-8", errors="replace")
        note = f"\n… [{cut:,} bytes cut from the middle] …\n"
        return head.decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc) -> None:
        self.started()


def run(command: str, cwd: Path, timeout: float, env: dict) -> subprocess.CompletedProcess:
    """subprocess.run(command, shell=True, capture_output=True, timeout=timeout), with three changes:
    - stdout and stderr are one stream, in the order written, read while the command runs, of which
      only the head and the tail are kept (the middle counted): a 3 GB `cat` costs no memory;
    - the command has a process group of its own, ended with the call, whether it returned, timed out
      or was interrupted (Ctrl-C): nothing it started (`sleep 300 &`, a server) outlives it;
    - no stdin: a command that waits for input gets end-of-file at once.
    A timeout raises subprocess.TimeoutExpired, with what the command printed before it as `output`."""
    with Output() as output:
        process = subprocess.Popen(
            command,
            shell=True,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output.pipe,
            stderr=output.pipe,
            start_new_session=True,
        )
        output.started()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            end_group(process)
            raise subprocess.TimeoutExpired(command, timeout, output=output.text()) from None
        except BaseException:  # a Ctrl-C, or anything else that ends the wait: the command goes too
            end_group(process)
            raise
        end_group(process)  # whatever it left running in the background
        return subprocess.CompletedProcess(command, process.returncode, stdout=output.text())


def end_group(process: subprocess.Popen) -> None:
    """Kill the command's whole process group (its shell, and every process the shell started)."""
    with suppress(ProcessLookupError, PermissionError):  # the group is already empty
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
