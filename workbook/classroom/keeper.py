"""grade_keeper — the graded program's parent: nothing it starts outlives its rung.

    python grade_keeper.py [--relay SOCKET PORT] -- PROGRAM [ARGS...]

The grader starts this small script (standard library only, so it starts in milliseconds), and it
starts the program. It makes itself a *child subreaper* (Linux prctl): whatever the program starts
and abandons, even a `setsid` daemon that forked twice, is handed to the keeper instead of to init.
So when the program ends, or the grader asks it to stop (SIGTERM), the keeper finds every process
left below it, kills them all, and only then exits with the program's exit code.

Inside the sandbox (workbook/classroom/sandbox.py) the program has a network of its own with only a
loopback in it. With `--relay`, the keeper listens on that loopback's PORT and carries each connection
to SOCKET, a Unix socket that the grader serves outside: the rung's replay server is the one thing
the program can reach.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> None:
    """Orphans below this process come to it, not to init (Linux only; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def descendants(root: int) -> list[int]:
    """Every live process below `root`, found by walking each process's parent in /proc."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()  # after "(command name)"
                parent_of[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue  # it ended while we looked
    below, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parent_of.items() if ppid == parent]
        below += children
        frontier += children
    return below


def kill_everything_below(me: int) -> None:
    """SIGKILL every descendant, reap them, and look again until none is left (a fork mid-kill is
    found on the next pass: its orphaned children come to us, the subreaper)."""
    for _ in range(100):
        left = descendants(me)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()


def reap() -> None:
    """Collect every child that has ended, so none stays a zombie in the list."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either side closes, then close both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()


def carry(client: socket.socket, connect) -> None:
    """One connection, carried to a fresh connection made by `connect()`, both ways at once."""
    try:
        upstream = connect()
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def serve_relay(listener: socket.socket, connect) -> None:
    """Accept forever (a daemon thread): each connection is carried by `carry`."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # the listener was closed: the run is over
        carry(client, connect)


def start_relay(unix_path: str, port: int) -> None:
    """Listen on this network's loopback and carry each connection to the grader's Unix socket."""
    listener = socket.create_server(("127.0.0.1", port))

    def connect() -> socket.socket:
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(unix_path)
        return upstream

    threading.Thread(target=serve_relay, args=(listener, connect), daemon=True).start()


def exit_code(returncode: int) -> int:
    """A program killed by signal N exits as a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    split = argv.index("--")
    options, program = argv[:split], argv[split + 1 :]
    become_subreaper()
    me = os.getpid()

    def stop(signum, frame):  # the grader's timeout: everything below us goes, then we do
        kill_everything_below(me)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    if options[:1] == ["--relay"]:
        start_relay(options[1], int(options[2]))
    try:
        child = subprocess.Popen(program, stdin=subprocess.DEVNULL)
    except OSError as err:
        print(f"error: cannot start {program[0]}: {err.strerror}", file=sys.stderr)
        return 126
    code = exit_code(child.wait())
    kill_everything_below(me)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
