"""A command's output, read while it runs and kept bounded: its head and its tail, the middle counted.

`subprocess.run(capture_output=True)` keeps everything a command prints until it ends: `cat big big big`
(3,000 times a 1 MiB file) then holds gigabytes. Here a thread reads the pipe as the command writes,
keeps the first and the last KEPT_BYTES / 2 bytes, and only counts the rest, so memory stays flat.
"""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import suppress

from workbook.scrub import scrub_secrets

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
